//! Stop strings matched across token boundaries and never sent: text is held back while
//! its tail could still be the start of a stop string.

/// Watches generated text for the request's stop strings.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text not sent yet: a tail that could begin a stop string.
    held: String,
}

/// What [`StopMatcher::push`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// Text that can be sent now.
    pub text: String,
    /// A stop string was found: `text` ends where it began; generation stops.
    pub stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops` (non-empty strings; empty ones are ignored).
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), held: String::new() }
    }

    /// Adds generated text. Returns what can be sent: everything up to the earliest stop
    /// string when one is complete, else everything but the longest tail that begins one.
    pub fn push(&mut self, text: &str) -> Pushed {
        self.held.push_str(text);
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            let mut sent = std::mem::take(&mut self.held);
            sent.truncate(at);
            return Pushed { text: sent, stopped: true };
        }
        let keep = self.stops.iter().map(|s| partial_suffix(&self.held, s)).max().unwrap_or(0);
        let cut = self.held.len() - keep;
        // `cut` starts a stop string's prefix, so it is a character boundary.
        let rest = if self.held.is_char_boundary(cut) { self.held.split_off(cut) } else { String::new() };
        Pushed { text: std::mem::replace(&mut self.held, rest), stopped: false }
    }

    /// The text held back when generation ends without a stop string: none of it was one.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// The length of the longest tail of `text` that is a proper prefix of `stop`.
fn partial_suffix(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&k| stop.get(..k).is_some_and(|prefix| text.ends_with(prefix)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds pieces, returns what was sent (held text flushed when nothing stopped) and
    /// whether a stop string ended it.
    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            let pushed = m.push(p);
            out.push_str(&pushed.text);
            if pushed.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn a_stop_string_split_across_pieces_is_found_and_not_sent() {
        assert_eq!(run(&["END"], &["hello E", "N", "D and more"]), ("hello ".to_string(), true));
        assert_eq!(run(&["\n\n"], &["a\n", "\nb"]), ("a".to_string(), true));
    }

    #[test]
    fn held_text_that_turns_out_not_to_stop_is_sent() {
        let mut m = StopMatcher::new(vec!["END".to_string()]);
        assert_eq!(m.push("abc E"), Pushed { text: "abc ".to_string(), stopped: false });
        assert_eq!(m.push("N"), Pushed { text: String::new(), stopped: false });
        assert_eq!(m.push("x"), Pushed { text: "ENx".to_string(), stopped: false });
        assert_eq!(run(&["END"], &["ab", "EN"]), ("abEN".to_string(), false));
    }

    #[test]
    fn the_earliest_of_several_stop_strings_wins() {
        assert_eq!(run(&["world", "lo w"], &["hello world"]), ("hel".to_string(), true));
        // "abc" starts before "b" in "xabc".
        assert_eq!(run(&["b", "abc"], &["xa", "bc"]), ("x".to_string(), true));
    }

    #[test]
    fn multibyte_text_is_held_and_cut_on_character_boundaries() {
        assert_eq!(run(&["é!"], &["caf", "é", "!"]), ("caf".to_string(), true));
        assert_eq!(run(&["🙂x"], &["a🙂", "y"]), ("a🙂y".to_string(), false));
        // A stop string whose first character shares a lead byte with the text's.
        assert_eq!(run(&["é"], &["è"]), ("è".to_string(), false));
    }

    #[test]
    fn without_stop_strings_everything_is_sent_at_once() {
        let mut m = StopMatcher::new(vec![String::new()]);
        assert_eq!(m.push("abc"), Pushed { text: "abc".to_string(), stopped: false });
    }
}
