//! The code pagescope writes into a traced program: the mover's page
//! ([`MOVER_CODE`]) and the bootstrap in the vDSO, and the layout of the
//! parking records written next to them (see [`super::Parked`]).

/// Where in the mover's code page the parking record is.
pub const PARK_RECORD: u64 = 2048;

/// First word of a valid parking record.
pub(super) const PARK_MAGIC: u64 = u64::from_le_bytes(*b"pgsPARK1");

/// Words of a `user_regs_struct`.
pub(super) const REGS_WORDS: usize = pagescope_sys::ptrace::Regs::WORDS;

/// Bytes of a parking record: magic, thread id, registers.
pub(super) const RECORD_BYTES: usize = 16 + REGS_WORDS * 8;

/// First word of the bootstrap in a vDSO ([`vdso_bootstrap`]).
pub(super) const BOOT_MAGIC: u64 = u64::from_le_bytes(*b"pgsBOOT1");

/// Offset of the bootstrap's code: the `syscall` instruction and
/// `pause()` loop that start [`MOVER_CODE`].
pub(super) const BOOT_CODE: u64 = 16;

/// Bytes of the bootstrap's code.
pub(super) const BOOT_LOOP: usize = 11;

/// Offset of the bootstrap's parking record.
pub(super) const BOOT_RECORD: u64 = 32;

/// Bytes of the bootstrap: magic, code, record.
pub(super) const BOOT_BYTES: usize = BOOT_RECORD as usize + RECORD_BYTES;

/// Where a parked thread's instruction pointer is, past the `syscall`
/// of the `pause()` loop, from the start of the code.
pub(super) const PAUSE_PC: u64 = 9;

/// The code of the mover's page: a `syscall` instruction for injection,
/// then a loop of `pause()` where the mover waits if it is ever let go,
/// then [`MOVER_BATCH`], which runs a table of system calls in one go.
///
/// ```text
///  0: 0f 05           syscall
///  2: b8 22 00 00 00  mov eax, 34 (pause)
///  7: 0f 05           syscall
///  9: eb f7           jmp 2
///     ; batch: rbx = table of 64-byte entries (nr, six arguments, result),
///     ; r12 = number of entries
///  b: 4d 85 e4        test r12, r12
///  e: 74 2a           jz 3a
/// 10: 48 8b 03        mov rax, [rbx]
/// 13: 48 8b 7b 08     mov rdi, [rbx+8]
/// 17: 48 8b 73 10     mov rsi, [rbx+16]
/// 1b: 48 8b 53 18     mov rdx, [rbx+24]
/// 1f: 4c 8b 53 20     mov r10, [rbx+32]
/// 23: 4c 8b 43 28     mov r8, [rbx+40]
/// 27: 4c 8b 4b 30     mov r9, [rbx+48]
/// 2b: 0f 05           syscall
/// 2d: 48 89 43 38     mov [rbx+56], rax
/// 31: 48 83 c3 40     add rbx, 64
/// 35: 49 ff cc        dec r12
/// 38: eb d1           jmp b
/// 3a: cc              int3 (SIGTRAP: the tracer sees the batch done)
/// 3b: eb fd           jmp 3a
/// ```
pub const MOVER_CODE: [u8; 61] = [
    0x0f, 0x05, 0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7, // syscall; pause loop
    0x4d, 0x85, 0xe4, 0x74, 0x2a, // test r12, r12; jz 3a
    0x48, 0x8b, 0x03, 0x48, 0x8b, 0x7b, 0x08, 0x48, 0x8b, 0x73, 0x10, // rax, rdi, rsi
    0x48, 0x8b, 0x53, 0x18, 0x4c, 0x8b, 0x53, 0x20, // rdx, r10
    0x4c, 0x8b, 0x43, 0x28, 0x4c, 0x8b, 0x4b, 0x30, // r8, r9
    0x0f, 0x05, 0x48, 0x89, 0x43, 0x38, // syscall; result
    0x48, 0x83, 0xc3, 0x40, 0x49, 0xff, 0xcc, 0xeb, 0xd1, // next entry
    0xcc, 0xeb, 0xfd, // int3
];

/// Offset of the batch routine in [`MOVER_CODE`].
pub const MOVER_BATCH: u64 = 0xb;

/// Bytes of one entry of a batch table: `nr`, six arguments, and the
/// result written back.
pub const BATCH_ENTRY: usize = 64;

/// clone flags of the mover: same address space, not auto-attached, no
/// signal to the parent when it ends (so the program's `wait` never sees
/// it).
pub const MOVER_CLONE_FLAGS: u64 =
    pagescope_sys::abi::CLONE_VM | pagescope_sys::abi::CLONE_UNTRACED;
