"""Run functions exported by an x86-64 ELF shared object inside the Bochs CPU emulator.

For testing AVX-512 (VNNI, BW, VL...) code on a host that cannot execute it: the .so is loaded
into the guest memory of bochscpu-python (Bochs 3.0 compiled as a library, AVX-512 included) and
each `call()` runs one function to completion in 64-bit mode, natively inside Bochs, with no
per-instruction Python hook.

    lib = EmulatedLibrary("libfoo.so")
    a = lib.alloc(bytes(...))              # guest address of a copy of the bytes
    n = lib.call("foo", a, len(...))       # System V call, returns rax (unsigned 64-bit)
    out = lib.read(a, 16)                  # guest memory back as bytes
    lib.reset_arena()

Dependencies (pip): bochscpu-python==0.4.0, pyelftools. gcc as well on hosts whose glibc is older
than 2.38 (see _import_bochscpu).

Guest layout (virtual, the same for every library; 2 MiB pages, all read/write/execute; CPL 3):
    0x00200000  2 MiB  page tables, hand-assembled stubs, the return sentinel, ud2 traps
    0x10000000         the .so (PT_LOAD segments at their p_vaddr from this base, .bss zeroed)
    0x20000000  2 MiB  stack (the 2 MiB below are unmapped: an overflow page-faults)
    0x40000000         arena for alloc() (arena_size, default 256 MiB)
Address 0 and everything else is unmapped, so stray accesses raise a page fault.

Limitations (by design, documented rather than emulated):
- No constructors (DT_INIT/DT_INIT_ARRAY) run, and nothing is linked but the .so itself:
  memcpy, memmove, memset, memcmp and bcmp are stubs below; every other undefined symbol
  (malloc included) is a `ud2` trap whose error, if it is called, names it (weak undefined
  symbols resolve to 0, as ld.so does). No syscalls either (EFER.SCE is off: #UD).
- The .so's data persists across calls, as in a process; each call starts with fresh registers
  (zmm zeroed) and an empty stack.
- Thread-local storage is not set up. TLS relocations are left as they are; FS's base points at
  unmapped memory so an initial-exec access faults with a message saying so, and
  __tls_get_addr, being undefined, is a trap like any other. A Rust panic ends there too.
- R_X86_64_IRELATIVE slots (and calls through them) get a ud2 trap naming the resolver; REL,
  RELR and COPY relocations raise NotImplementedError at load time.
- A fault reports RIP as Bochs has it when it raises the exception: after the faulting
  instruction, except for faults on instruction fetch.
- Bochs' CPU 0 is shared by every bochscpu Session, so this module makes one Session for the
  process, and its CPU model (CPU_MODELS) is chosen by the first EmulatedLibrary.
"""

import atexit
import bisect
import ctypes
import io
import mmap
import os
import struct
import subprocess
import tempfile

from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile


def _import_bochscpu():
    # The bochscpu-python 0.4.0 wheel is tagged manylinux_2_28 but needs two glibc 2.38 symbols.
    # On an older glibc (Debian 12: 2.36) build them as a tiny shim, load it RTLD_GLOBAL so that
    # the extension's lookups find it, and import again.
    try:
        import bochscpu
    except ImportError as e:
        if "__isoc23_" not in str(e):
            raise
        shim = os.path.join(tempfile.gettempdir(), f"bochs_so_isoc23_shim_{os.getuid()}.so")
        if not os.path.exists(shim):
            src = (
                "#include <stdarg.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
                "unsigned long long __isoc23_strtoull(const char *s, char **e, int b)"
                " { return strtoull(s, e, b); }\n"
                "int __isoc23_sscanf(const char *s, const char *f, ...)"
                " { va_list a; va_start(a, f); int r = vsscanf(s, f, a); va_end(a); return r; }\n"
            )
            tmp = f"{shim}.{os.getpid()}"
            subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-x", "c", "-", "-o", tmp],
                           input=src, text=True, check=True)
            os.replace(tmp, shim)
        ctypes.CDLL(shim, mode=ctypes.RTLD_GLOBAL)
        import bochscpu
    import bochscpu.memory
    return bochscpu


_bx = _import_bochscpu()
_native = ctypes.CDLL(_bx._bochscpu.__file__)  # the extension itself, for a few Bochs symbols

# Index of each model in Bochs 3.0's cpu/cpudb.h: the value of the "cpu.model" parameter. The
# wheel's own list of names is shorter, so its default (27) is Bochs' corei3_cnl, whose AVX-512
# has no VNNI; we set the index directly. Checked with CPUID leaf 1 (family 6, model in brackets).
CPU_MODELS = {
    "corei7_skylake_x": 26,  # [0x55] AVX-512 F/CD/BW/DQ/VL, no VNNI
    "corei3_cnl": 27,        # [0x66] + IFMA/VBMI, no VNNI
    "corei7_icelake_u": 28,  # [0x7e] + VNNI, VBMI2, BITALG, VPOPCNTDQ
    "tigerlake": 29,         # [0x8c] + VP2INTERSECT
    "sapphire_rapids": 30,   # [0x8f] + BF16, FP16, AVX-VNNI, AMX
    "arrow_lake": 31,        # [0xc6] AVX2 and AVX-VNNI, no AVX-512: for testing fallbacks
}

PAGE = 0x1000
BIG = 0x200000  # 2 MiB: the granularity of mappings (one PD entry each)
SYS_VA, IMAGE_VA, STACK_VA, ARENA_VA = 0x0020_0000, 0x1000_0000, 0x2000_0000, 0x4000_0000
STACK_TOP = STACK_VA + BIG
FS_BASE = 0x7F00_0000_0000  # unmapped, so that a TLS access faults recognisably

# Layout of the SYS region: PML4, PDPT and four page directories (VA 0-4 GiB), then code.
PDPT_OFF, PD_OFF = 0x1000, 0x2000
SENTINEL = SYS_VA + 0x8000      # a ud2 that every call returns to: reaching it means success
STUBS = SYS_VA + 0x8010         # the hand-assembled functions below, packed
TRAPS = SYS_VA + 0x10000        # one 8-byte ud2 slot per unresolvable symbol

# Hand-assembled (GNU as, Intel syntax) so that no assembler is needed at run time.
_STUB_CODE = {
    # mov eax, edi; mov ecx, esi; cpuid; ret
    "cpuid": "89f8 89f1 0fa2 c3",
    # xor ecx, ecx; xgetbv; shl rdx, 32; or rax, rdx; ret
    "xgetbv": "31c9 0f01d0 48c1e220 4809d0 c3",
    # mov rax, rdi; mov rcx, rdx; rep movsb; ret
    "memcpy": "4889f8 4889d1 f3a4 c3",
    # mov rax, rdi; mov rcx, rdx; mov r8, rdi; sub r8, rsi; cmp r8, rdx; jb back;
    # rep movsb; ret; back: lea rsi, [rsi+rdx-1]; lea rdi, [rdi+rdx-1]; std; rep movsb; cld; ret
    "memmove": "4889f8 4889d1 4989f8 4929f0 4939d0 7203 f3a4 c3"
               " 488d7416ff 488d7c17ff fd f3a4 fc c3",
    # mov r8, rdi; mov eax, esi; mov rcx, rdx; rep stosb; mov rax, r8; ret
    "memset": "4989f8 89f0 4889d1 f3aa 4c89c0 c3",
    # xor eax, eax; mov rcx, rdx; repe cmpsb; je done;
    # movzx eax, byte [rdi-1]; movzx ecx, byte [rsi-1]; sub eax, ecx; done: ret
    "memcmp": "31c0 4889d1 f3a6 740a 0fb647ff 0fb64eff 29c8 c3",
}
_STUB_CODE["bcmp"] = _STUB_CODE["memcmp"]
_LIBC_STUBS = ("memcpy", "memmove", "memset", "memcmp", "bcmp")

_VECTORS = {0: "#DE divide error", 1: "#DB debug", 3: "#BP breakpoint", 4: "#OF overflow",
            5: "#BR bound", 6: "#UD invalid opcode", 7: "#NM device not available",
            8: "#DF double fault", 10: "#TS invalid TSS", 11: "#NP segment not present",
            12: "#SS stack fault", 13: "#GP general protection", 14: "#PF page fault",
            16: "#MF x87 error", 17: "#AC alignment check", 18: "#MC machine check",
            19: "#XM SIMD floating-point", 21: "#CP control protection"}
_ARG_REGS = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")
_MASK64 = (1 << 64) - 1

# x86-64 relocation types (System V psABI)
R_NONE, R_64, R_COPY, R_GLOB_DAT, R_JUMP_SLOT, R_RELATIVE = 0, 1, 5, 6, 7, 8
R_DTPMOD64, R_DTPOFF64, R_TPOFF64, R_IRELATIVE = 16, 17, 18, 37


class EmulationError(RuntimeError):
    """A guest exception, a call to an unsupported symbol, or a timeout. `vector` is the x86
    exception vector (None for a timeout); `rip`, `cr2` and `error_code` are as Bochs had them."""

    def __init__(self, message, vector=None, rip=None, cr2=None, error_code=None):
        super().__init__(message)
        self.vector, self.rip, self.cr2, self.error_code = vector, rip, cr2, error_code


# --- the process-wide session ---------------------------------------------------------------

_session = None
_session_model = None
_events = []        # (vector, error code, rip, cr2) of the exception that stopped a run
_icount = [0]       # instructions counted by count_instructions()


def _on_exception(sess, cpu_id, vector, error_code):
    cpu = sess.cpu
    _events.append((vector, error_code, cpu.rip, cpu.cr2))
    sess.stop()


def _on_instruction(sess, cpu_id, insn):
    _icount[0] += 1


_hook = _bx.Hook()
_hook.exception = _on_exception
_counting_hook = _bx.Hook()
_counting_hook.exception = _on_exception
_counting_hook.after_execution = _on_instruction


def _get_session(cpu_model):
    global _session, _session_model
    if _session is None:
        # The model is read when the CPU is created, i.e. by Session().
        get_enum = _native._ZN13bx_real_sim_c14get_param_enumEPKcP10bx_param_c
        get_enum.restype = ctypes.c_void_p
        get_enum.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        set_val = _native._ZN14bx_param_num_c15set_initial_valEl  # sets without a range check
        set_val.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        set_val(get_enum(None, b"cpu.model", None), CPU_MODELS[cpu_model])
        _session, _session_model = _bx.Session(), cpu_model
    elif cpu_model != _session_model:
        raise ValueError(f"this process already emulates {_session_model}; Bochs has one CPU")
    return _session


@atexit.register
def _shutdown():
    # Destroy the Session before C++ static destructors run: with the Session leaked, the process
    # aborts at exit ("free(): invalid pointer"). The hooks reference this module through their
    # callbacks, a cycle the garbage collector cannot see, so we break it here.
    global _session, _hook, _counting_hook
    _session = _hook = _counting_hook = None


class _Watchdog:
    """A POSIX timer whose expiry calls Bochs' cpu_set_killbit(0) on a glibc helper thread
    (SIGEV_THREAD): Bochs then leaves its loop at the next instruction boundary. A Python thread
    could not do it: Session.run keeps the GIL. CPU 0 is the one every Session uses.

    After the first expiry the timer fires again every REPEAT seconds until it is disarmed: a
    fresh-clone CI run once spun in the endless-loop self-test for 17 minutes after its 0.5 s
    timeout, so a single kill request can be lost. (A request that lands after a run has
    returned is harmless: each run clears the kill bit when it starts.)"""

    REPEAT = 0.25

    class _Sigevent(ctypes.Structure):
        _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                    ("function", ctypes.c_void_p), ("attributes", ctypes.c_void_p),
                    ("pad", ctypes.c_byte * 32)]

    class _Itimerspec(ctypes.Structure):
        _fields_ = [("interval", ctypes.c_long * 2), ("value", ctypes.c_long * 2)]

    def __init__(self):
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.timer_settime.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                             ctypes.c_void_p]
        self._event = self._Sigevent(value=0, notify=2,  # SIGEV_THREAD
                                     function=ctypes.cast(_native.cpu_set_killbit,
                                                          ctypes.c_void_p).value)
        self._timer = ctypes.c_void_p()
        if self._libc.timer_create(1, ctypes.byref(self._event), ctypes.byref(self._timer)):
            raise OSError(ctypes.get_errno(), "timer_create")  # 1 = CLOCK_MONOTONIC

    def arm(self, seconds):
        spec = self._Itimerspec()
        seconds = max(seconds, 1e-6)  # 0 would disarm the timer
        spec.value[0], spec.value[1] = int(seconds), int(seconds % 1 * 1e9)
        spec.interval[0], spec.interval[1] = int(self.REPEAT), int(self.REPEAT % 1 * 1e9)
        self._libc.timer_settime(self._timer, 0, ctypes.byref(spec), None)

    def disarm(self):
        self._libc.timer_settime(self._timer, 0, ctypes.byref(self._Itimerspec()), None)


_watchdog = None
_phys_next = [BIG]  # the next free guest-physical address: never reused (see EmulatedLibrary._map)


def _segment(selector, attr, base=0):
    s = _bx.Segment()
    s.present, s.selector, s.base, s.limit, s.attr = True, selector, base, 0xFFFF_FFFF, attr
    return s


# --- the library ----------------------------------------------------------------------------

class EmulatedLibrary:
    """An x86-64 ELF .so loaded at IMAGE_VA in the emulator, with a stack and an arena."""

    def __init__(self, path, *, arena_size=256 << 20, timeout=60.0, cpu_model="sapphire_rapids"):
        global _watchdog
        if cpu_model not in CPU_MODELS:
            raise ValueError(f"unknown cpu_model {cpu_model!r}; choose from {sorted(CPU_MODELS)}")
        self._session = _get_session(cpu_model)
        _watchdog = _watchdog or _Watchdog()
        self.path, self.timeout = path, timeout
        self._regions = []  # (va, size, mmap)
        _, self._cr3 = self._map(SYS_VA, BIG)  # first: the page tables are in it
        self._write(SYS_VA, struct.pack("<Q", self._cr3 + PDPT_OFF | 7))  # present|rw|user
        for i in range(4):  # PDPT: one page directory per GiB
            pd = self._cr3 + PD_OFF + i * PAGE
            self._write(SYS_VA + PDPT_OFF + 8 * i, struct.pack("<Q", pd | 7))
        self._write(SENTINEL, b"\x0f\x0b")
        self._stubs = {}
        at = STUBS
        for name, code in _STUB_CODE.items():
            self._stubs[name] = at
            at = self._emit(at, bytes.fromhex(code))
        self._traps = {}  # address -> label; the error message of a call to it names the label
        self.symbols = {}  # every defined function/object of .dynsym and .symtab -> guest address
        self._functions = []  # sorted (address, size, name), for symbolize()
        with open(path, "rb") as f:
            self._load(ELFFile(io.BytesIO(f.read())))
        self._map(STACK_VA, BIG)
        self._arena_end = ARENA_VA + _round_up(arena_size, BIG)
        self._arena_next = ARENA_VA
        self._arena, _ = self._map(ARENA_VA, self._arena_end - ARENA_VA)
        self._state = self._initial_state()

    # -- public API --

    def call(self, symbol, *args, timeout=None):
        """Call `symbol` (a name or a guest address) with up to 6 integer/pointer arguments;
        return rax as an unsigned 64-bit integer. Raises EmulationError on any guest fault."""
        self._run(self._address(symbol), args, timeout, _hook)
        return self._session.cpu.rax

    def call_f64(self, symbol, *args, timeout=None):
        """Like call(), for a function returning a double (the low 64 bits of xmm0)."""
        self._run(self._address(symbol), args, timeout, _hook)
        return struct.unpack("<d", struct.pack("<Q", self._session.cpu.state.zmm[0].q[0]))[0]

    def call_f32(self, symbol, *args, timeout=None):
        """Like call(), for a function returning a float (the low 32 bits of xmm0)."""
        self._run(self._address(symbol), args, timeout, _hook)
        bits = self._session.cpu.state.zmm[0].q[0] & 0xFFFF_FFFF
        return struct.unpack("<f", struct.pack("<I", bits))[0]

    def count_instructions(self, symbol, *args, timeout=None):
        """Run like call() but count the instructions executed (with a per-instruction Python
        hook: much slower, for measurements only). Returns the count."""
        _icount[0] = 0
        self._run(self._address(symbol), args, timeout, _counting_hook)
        return _icount[0]

    def cpuid(self, leaf, subleaf=0):
        """(eax, ebx, ecx, edx) of CPUID executed in the guest."""
        self._run(self._stubs["cpuid"], (leaf, subleaf), None, _hook)
        cpu = self._session.cpu
        return tuple(r & 0xFFFF_FFFF for r in (cpu.rax, cpu.rbx, cpu.rcx, cpu.rdx))

    def xgetbv(self):
        """XCR0 as XGETBV reads it in the guest."""
        self._run(self._stubs["xgetbv"], (), None, _hook)
        return self._session.cpu.rax

    def alloc(self, data, align=64):
        """Copy `data` into the arena; return its guest address (aligned to `align`)."""
        addr = _round_up(self._arena_next, align)
        if addr + len(data) > self._arena_end:
            raise MemoryError(f"arena full: {len(data)} bytes requested, "
                              f"{self._arena_end - addr} left (see arena_size)")
        self._arena_next = addr + len(data)
        self._write(addr, data)
        return addr

    def read(self, addr, n):
        """n bytes of guest memory at `addr` (arena, stack or the .so's image)."""
        mm, off = self._locate(addr, n)
        return mm[off:off + n]

    def write(self, addr, data):
        """Overwrite guest memory at `addr`. Data only: Bochs keeps decoding code it has run."""
        self._write(addr, data)

    def reset_arena(self):
        """Free every allocation and zero the memory they used."""
        used = self._arena_next - ARENA_VA
        self._arena[:used] = bytes(used)
        self._arena_next = ARENA_VA

    def symbolize(self, addr):
        """'function+0xoffset' for an address inside one of the .so's functions, else None."""
        i = bisect.bisect_right(self._functions, (addr, float("inf"))) - 1
        if i >= 0:
            start, size, name = self._functions[i]
            if addr < start + max(size, 1):
                return f"{name}+{addr - start:#x}"
        return None

    # -- memory --

    def _map(self, va, size):
        """Back guest [va, va+size) (2 MiB aligned, below 4 GiB) with fresh zeroed host memory;
        return (mmap, guest-physical address). Physical addresses are never reused: bochscpu's
        GPA->host map is process-wide, and Bochs caches decoded instructions by physical
        address, unaware of the writes we make from the host side."""
        assert va % BIG == 0 and size % BIG == 0 and va + size <= 1 << 32
        mm = mmap.mmap(-1, size)
        hva = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        pa = _phys_next[0]
        _phys_next[0] += size
        for off in range(0, size, PAGE):
            _bx.memory.page_insert(pa + off, hva + off)
        self._regions.append((va, size, mm))
        for off in range(0, size, BIG):  # PD entries: present | writable | user | 2 MiB page
            self._write(SYS_VA + PD_OFF + (va + off >> 21) * 8, struct.pack("<Q", pa + off | 0x87))
        return mm, pa

    def _locate(self, addr, n):
        for va, size, mm in self._regions:
            if va <= addr and addr + n <= va + size:
                return mm, addr - va
        raise ValueError(f"guest range {addr:#x}+{n:#x} is not mapped")

    def _write(self, addr, data):
        mm, off = self._locate(addr, len(data))
        mm[off:off + len(data)] = data

    def _emit(self, at, code):
        self._write(at, code)
        return at + len(code)

    def _trap(self, label):
        """A fresh ud2 slot in TRAPS whose execution reports `label`."""
        at = TRAPS + 8 * len(self._traps)
        self._emit(at, b"\x0f\x0b")
        self._traps[at] = label
        return at

    # -- loading --

    def _load(self, elf):
        if elf["e_machine"] != "EM_X86_64" or elf["e_type"] != "ET_DYN":
            raise ValueError(f"{self.path}: not an x86-64 shared object")
        loads = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        end = max(s["p_vaddr"] + s["p_memsz"] for s in loads)
        if end > STACK_VA - IMAGE_VA:
            raise ValueError(f"{self.path}: image of {end:#x} bytes does not fit")
        self._map(IMAGE_VA, _round_up(end, BIG))  # zeroed, so .bss (p_memsz > p_filesz) is too
        for seg in loads:
            self._write(IMAGE_VA + seg["p_vaddr"], seg.data())

        for section in elf.iter_sections():
            if section["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM"):
                for sym in section.iter_symbols():
                    kind = sym["st_info"]["type"]
                    if sym.name and sym["st_shndx"] != "SHN_UNDEF" and kind in ("STT_FUNC",
                                                                                 "STT_OBJECT"):
                        addr = IMAGE_VA + sym["st_value"]
                        self.symbols.setdefault(sym.name, addr)
                        if kind == "STT_FUNC":
                            self._functions.append((addr, sym["st_size"], sym.name))
        self._functions = sorted(set(self._functions))

        dynamic = next((s for s in elf.iter_segments() if isinstance(s, DynamicSegment)), None)
        if dynamic is None:
            return
        tables = dynamic.get_relocation_tables()
        if "REL" in tables or "RELR" in tables:
            raise NotImplementedError(f"{self.path}: only RELA relocations are supported")
        resolved = {}
        for key in ("RELA", "JMPREL"):
            for rel in tables[key].iter_relocations() if key in tables else ():
                kind, addend = rel["r_info_type"], rel["r_addend"]
                where = IMAGE_VA + rel["r_offset"]
                if kind == R_RELATIVE:
                    value = IMAGE_VA + addend
                elif kind in (R_64, R_GLOB_DAT, R_JUMP_SLOT):
                    index = rel["r_info_sym"]
                    if index not in resolved:
                        resolved[index] = self._resolve(dynamic.get_symbol(index))
                    value = resolved[index] + addend
                elif kind == R_IRELATIVE:
                    value = self._trap(f"the IFUNC resolver at {IMAGE_VA + addend:#x} "
                                       "(IRELATIVE relocations are not supported)")
                elif kind in (R_NONE, R_DTPMOD64, R_DTPOFF64, R_TPOFF64):
                    continue  # TLS is not supported (see the module's docstring)
                else:
                    raise NotImplementedError(f"{self.path}: relocation type {kind} at {where:#x}")
                self._write(where, struct.pack("<Q", value & _MASK64))

    def _resolve(self, sym):
        """Guest address for a relocation's symbol (S in the psABI's formulas)."""
        if sym["st_shndx"] != "SHN_UNDEF":
            if sym["st_info"]["type"] == "STT_GNU_IFUNC":
                return self._trap(f"{sym.name} (an IFUNC: not supported)")
            return IMAGE_VA + sym["st_value"]
        if sym.name in _LIBC_STUBS:
            return self._stubs[sym.name]
        if sym["st_info"]["bind"] == "STB_WEAK":
            return 0
        return self._trap(sym.name)

    def _address(self, symbol):
        if isinstance(symbol, int):
            return symbol
        try:
            return self.symbols[symbol]
        except KeyError:
            raise KeyError(f"{self.path} defines no symbol {symbol!r}") from None

    # -- running --

    def _initial_state(self):
        st = _bx.State()
        st.cr0 = 1 << 0 | 1 << 1 | 1 << 4 | 1 << 5 | 1 << 16 | 1 << 31  # PE MP ET NE WP PG
        st.cr3 = self._cr3
        st.cr4 = 1 << 5 | 1 << 9 | 1 << 10 | 1 << 18  # PAE OSFXSR OSXMMEXCPT OSXSAVE
        st.efer = 1 << 8 | 1 << 10 | 1 << 11  # LME LMA NXE
        st.xcr0 = 0xE7  # x87 SSE AVX opmask ZMM_Hi256 Hi16_ZMM
        st.mxcsr, st.mxcsr_mask = 0x1F80, 0xFFFF
        st.fpcw, st.fptw = 0x37F, 0xFFFF  # x87 default control word, all registers empty
        st.rflags = 0x2
        st.cs = _segment(0x33, 0x22FB)  # 64-bit code, DPL 3
        data = _segment(0x2B, 0xCF3)
        st.ds = st.es = st.ss = st.gs = data
        st.fs = _segment(0x2B, 0xCF3, base=FS_BASE)
        return st

    def _run(self, addr, args, timeout, hook):
        if len(args) > len(_ARG_REGS):
            raise TypeError(f"at most {len(_ARG_REGS)} integer arguments are supported")
        st = self._state  # every call starts from the same registers (zmm, flags... zeroed)
        st.rip, st.rsp = addr, STACK_TOP - 8  # rsp + 8 is 16-byte aligned, as after a call
        for reg, value in zip(_ARG_REGS, tuple(args) + (0,) * (6 - len(args))):
            setattr(st, reg, value & _MASK64)
        self._write(st.rsp, struct.pack("<Q", SENTINEL))  # the return address
        self._session.cpu.state = st
        timeout = self.timeout if timeout is None else timeout
        _events.clear()
        _watchdog.arm(timeout)
        try:
            self._session.run([hook])
        finally:
            _watchdog.disarm()
        cpu = self._session.cpu
        if not _events:
            raise EmulationError(f"timed out after {timeout} s; RIP {self._where(cpu.rip)}",
                                 rip=cpu.rip)
        vector, error_code, rip, cr2 = _events[0]
        if vector == 6 and rip == SENTINEL + 2:
            return
        if vector == 6 and rip - 2 in self._traps:
            caller = struct.unpack("<Q", self.read(cpu.rsp, 8))[0]
            message = (f"call to unsupported external symbol {self._traps[rip - 2]} "
                       f"(return address {self._where(caller)})")
        else:
            message = (f"{_VECTORS.get(vector, 'exception')} (vector {vector}, error code "
                       f"{error_code:#x}) at RIP {self._where(rip)}")
            if vector == 14:
                message += f", CR2 {cr2:#x}" + _page_fault_hint(cr2)
        raise EmulationError(message, vector, rip, cr2, error_code)

    def _where(self, addr):
        name = self.symbolize(addr)
        return f"{addr:#x} ({name})" if name else f"{addr:#x}"


def _page_fault_hint(cr2):
    if STACK_VA - BIG <= cr2 < STACK_VA:
        return " (stack overflow: the stack is 2 MiB)"
    if FS_BASE - (1 << 30) <= cr2 < FS_BASE + PAGE:
        return " (a thread-local variable: TLS is not supported)"
    return ""


def _round_up(value, align):
    return (value + align - 1) // align * align
