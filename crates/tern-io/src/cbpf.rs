//! Classic BPF programs for steering an `SO_REUSEPORT` group, with an interpreter that runs them
//! as the kernel does.
//!
//! A program attached with `SO_ATTACH_REUSEPORT_CBPF` ([`crate::udp::UdpPort::attach_reuseport_cbpf`])
//! sees a datagram's UDP payload (offset 0 is its first byte, `ld len` its length) and returns
//! the index, in bind order, of the group's socket that receives it; an index past the group's
//! last socket makes the kernel fall back to its flow hash. A load past the payload's end ends
//! the program with 0, as the kernel's does.
//!
//! [`Program::run`] interprets a program with those semantics: it is what [`crate::memnet`]
//! steers with, and the twin the engines test their compiled programs against without a socket.
//! [`Program::check`] refuses what the kernel's checker (`bpf_check_classic`) refuses, so a
//! program that passes it attaches.
//!
//! Only the instructions a steering program needs are supported: loads of a byte, half-word or
//! word at a constant or `X`-relative offset, the length, scratch memory and immediates; `add`,
//! `sub`, `mod` by a constant; `add x`; `tax`/`txa`; `ja`, `jeq`/`jgt`/`jge` against a constant
//! or `X`; `ret` of a constant or `A`.
//!
//! ```
//! use tern_io::cbpf::{Insn, Program};
//! // Socket (byte 0 of the payload) mod 4.
//! let p = Program::new(vec![Insn::ld_b_abs(0), Insn::alu_mod_k(4), Insn::ret_a()]).unwrap();
//! assert_eq!(p.run(&[7, 1, 2]), 3);
//! assert_eq!(p.run(&[]), 0); // a load past the end returns 0
//! ```

use std::fmt;

/// Most instructions a classic BPF program may have (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;
/// Scratch memory words (`BPF_MEMWORDS`).
pub const MEM_WORDS: u32 = 16;

// Opcodes (class | size | mode, class | op | source) from <linux/filter.h>.
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_W_IND: u16 = 0x40;
const LD_H_IND: u16 = 0x48;
const LD_B_IND: u16 = 0x50;
const LD_W_LEN: u16 = 0x80;
const LD_IMM: u16 = 0x00;
const LD_MEM: u16 = 0x60;
const LDX_IMM: u16 = 0x01;
const LDX_MEM: u16 = 0x61;
const ST: u16 = 0x02;
const STX: u16 = 0x03;
const ALU_ADD_K: u16 = 0x04;
const ALU_ADD_X: u16 = 0x0c;
const ALU_SUB_K: u16 = 0x14;
const ALU_MOD_K: u16 = 0x94;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const JGE_K: u16 = 0x35;
const JEQ_X: u16 = 0x1d;
const JGT_X: u16 = 0x2d;
const JGE_X: u16 = 0x3d;
const RET_K: u16 = 0x06;
const RET_A: u16 = 0x16;
const TAX: u16 = 0x07;
const TXA: u16 = 0x87;

/// One instruction, laid out as the kernel's `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Instructions to skip when a conditional jump holds.
    pub jt: u8,
    /// Instructions to skip when it does not.
    pub jf: u8,
    /// The constant operand.
    pub k: u32,
}

impl Insn {
    const fn op(code: u16, k: u32) -> Insn {
        Insn { code, jt: 0, jf: 0, k }
    }
    /// `A = payload[k]`.
    pub const fn ld_b_abs(k: u32) -> Insn {
        Insn::op(LD_B_ABS, k)
    }
    /// `A = payload[k..k+2]`, big-endian.
    pub const fn ld_h_abs(k: u32) -> Insn {
        Insn::op(LD_H_ABS, k)
    }
    /// `A = payload[k..k+4]`, big-endian.
    pub const fn ld_w_abs(k: u32) -> Insn {
        Insn::op(LD_W_ABS, k)
    }
    /// `A = payload[X+k]`.
    pub const fn ld_b_ind(k: u32) -> Insn {
        Insn::op(LD_B_IND, k)
    }
    /// `A = payload[X+k..X+k+2]`, big-endian.
    pub const fn ld_h_ind(k: u32) -> Insn {
        Insn::op(LD_H_IND, k)
    }
    /// `A = payload[X+k..X+k+4]`, big-endian.
    pub const fn ld_w_ind(k: u32) -> Insn {
        Insn::op(LD_W_IND, k)
    }
    /// `A = payload length`.
    pub const fn ld_len() -> Insn {
        Insn::op(LD_W_LEN, 0)
    }
    /// `A = k`.
    pub const fn ld_imm(k: u32) -> Insn {
        Insn::op(LD_IMM, k)
    }
    /// `A = M[k]`.
    pub const fn ld_mem(k: u32) -> Insn {
        Insn::op(LD_MEM, k)
    }
    /// `X = k`.
    pub const fn ldx_imm(k: u32) -> Insn {
        Insn::op(LDX_IMM, k)
    }
    /// `X = M[k]`.
    pub const fn ldx_mem(k: u32) -> Insn {
        Insn::op(LDX_MEM, k)
    }
    /// `M[k] = A`.
    pub const fn st(k: u32) -> Insn {
        Insn::op(ST, k)
    }
    /// `M[k] = X`.
    pub const fn stx(k: u32) -> Insn {
        Insn::op(STX, k)
    }
    /// `A += k`.
    pub const fn alu_add_k(k: u32) -> Insn {
        Insn::op(ALU_ADD_K, k)
    }
    /// `A += X`.
    pub const fn alu_add_x() -> Insn {
        Insn::op(ALU_ADD_X, 0)
    }
    /// `A -= k`.
    pub const fn alu_sub_k(k: u32) -> Insn {
        Insn::op(ALU_SUB_K, k)
    }
    /// `A %= k` (k ≠ 0).
    pub const fn alu_mod_k(k: u32) -> Insn {
        Insn::op(ALU_MOD_K, k)
    }
    /// `X = A`.
    pub const fn tax() -> Insn {
        Insn::op(TAX, 0)
    }
    /// `A = X`.
    pub const fn txa() -> Insn {
        Insn::op(TXA, 0)
    }
    /// Skip `k` instructions.
    pub const fn ja(k: u32) -> Insn {
        Insn::op(JA, k)
    }
    /// If `A == k` skip `jt` instructions, else `jf`.
    pub const fn jeq(k: u32, jt: u8, jf: u8) -> Insn {
        Insn { code: JEQ_K, jt, jf, k }
    }
    /// If `A > k` skip `jt` instructions, else `jf`.
    pub const fn jgt(k: u32, jt: u8, jf: u8) -> Insn {
        Insn { code: JGT_K, jt, jf, k }
    }
    /// If `A >= k` skip `jt` instructions, else `jf`.
    pub const fn jge(k: u32, jt: u8, jf: u8) -> Insn {
        Insn { code: JGE_K, jt, jf, k }
    }
    /// If `A > X` skip `jt` instructions, else `jf`.
    pub const fn jgt_x(jt: u8, jf: u8) -> Insn {
        Insn { code: JGT_X, jt, jf, k: 0 }
    }
    /// Return `k`.
    pub const fn ret_k(k: u32) -> Insn {
        Insn::op(RET_K, k)
    }
    /// Return `A`.
    pub const fn ret_a() -> Insn {
        Insn::op(RET_A, 0)
    }

    fn is_cond_jump(&self) -> bool {
        matches!(self.code, JEQ_K | JGT_K | JGE_K | JEQ_X | JGT_X | JGE_X)
    }
}

impl fmt::Display for Insn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (k, jt, jf) = (self.k, self.jt, self.jf);
        match self.code {
            LD_B_ABS => write!(f, "ldb [{k}]"),
            LD_H_ABS => write!(f, "ldh [{k}]"),
            LD_W_ABS => write!(f, "ld [{k}]"),
            LD_B_IND => write!(f, "ldb [x+{k}]"),
            LD_H_IND => write!(f, "ldh [x+{k}]"),
            LD_W_IND => write!(f, "ld [x+{k}]"),
            LD_W_LEN => write!(f, "ld len"),
            LD_IMM => write!(f, "ld #{k}"),
            LD_MEM => write!(f, "ld M[{k}]"),
            LDX_IMM => write!(f, "ldx #{k}"),
            LDX_MEM => write!(f, "ldx M[{k}]"),
            ST => write!(f, "st M[{k}]"),
            STX => write!(f, "stx M[{k}]"),
            ALU_ADD_K => write!(f, "add #{k}"),
            ALU_ADD_X => write!(f, "add x"),
            ALU_SUB_K => write!(f, "sub #{k}"),
            ALU_MOD_K => write!(f, "mod #{k}"),
            TAX => write!(f, "tax"),
            TXA => write!(f, "txa"),
            JA => write!(f, "ja +{k}"),
            JEQ_K => write!(f, "jeq #{k:#x}, +{jt}, +{jf}"),
            JGT_K => write!(f, "jgt #{k}, +{jt}, +{jf}"),
            JGE_K => write!(f, "jge #{k}, +{jt}, +{jf}"),
            JEQ_X => write!(f, "jeq x, +{jt}, +{jf}"),
            JGT_X => write!(f, "jgt x, +{jt}, +{jf}"),
            JGE_X => write!(f, "jge x, +{jt}, +{jf}"),
            RET_K => write!(f, "ret #{k}"),
            RET_A => write!(f, "ret a"),
            c => write!(f, "unknown {c:#06x}"),
        }
    }
}

/// A checked program: [`Program::check`] holds for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    insns: Vec<Insn>,
    /// The same instructions decoded for [`Program::run`]: jumps with absolute targets.
    ops: Vec<Op>,
}

/// A decoded instruction (see [`Program::run`]); jump targets are instruction indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    LdAbs1(u32),
    LdAbs2(u32),
    LdAbs4(u32),
    LdInd1(u32),
    LdInd2(u32),
    LdInd4(u32),
    LdLen,
    LdImm(u32),
    LdMem(u8),
    LdxImm(u32),
    LdxMem(u8),
    St(u8),
    Stx(u8),
    AddK(u32),
    AddX,
    SubK(u32),
    ModK(u32),
    Tax,
    Txa,
    Ja(u32),
    JeqK(u32, u32, u32),
    JgtK(u32, u32, u32),
    JgeK(u32, u32, u32),
    JeqX(u32, u32),
    JgtX(u32, u32),
    JgeX(u32, u32),
    RetK(u32),
    RetA,
    // Superinstructions: a load fused with the `jeq #k` after it (load offset, compared
    // constant, targets). The jump keeps its own slot too, for jumps that land on it.
    LdAbs1Jeq(u32, u32, u32, u32),
    LdAbs2Jeq(u32, u32, u32, u32),
    LdAbs4Jeq(u32, u32, u32, u32),
    LdInd1Jeq(u32, u32, u32, u32),
    LdInd2Jeq(u32, u32, u32, u32),
    LdInd4Jeq(u32, u32, u32, u32),
}

impl Op {
    /// Decodes a checked program for [`Program::run`]: each instruction in its slot, with jumps
    /// that land on a `ja` taken straight to where the `ja` goes, and a load followed by a
    /// `jeq #k` fused into one step. Slots stay aligned with instructions (a fused load's jump
    /// keeps its own slot), so every jump target means what it meant.
    fn decode_all(insns: &[Insn]) -> Vec<Op> {
        let mut ops: Vec<Op> = insns.iter().enumerate().map(|(i, &insn)| Op::decode(i, insn)).collect();
        // Jump threading, from the end: checked programs jump forward only, so a `ja`'s own
        // target is already threaded when it is reached.
        let through = |ops: &[Op], t: u32| match ops.get(t as usize) {
            Some(Op::Ja(to)) => *to,
            _ => t,
        };
        for i in (0..ops.len()).rev() {
            ops[i] = match ops[i] {
                Op::Ja(t) => Op::Ja(through(&ops, t)),
                Op::JeqK(k, t, f) => Op::JeqK(k, through(&ops, t), through(&ops, f)),
                Op::JgtK(k, t, f) => Op::JgtK(k, through(&ops, t), through(&ops, f)),
                Op::JgeK(k, t, f) => Op::JgeK(k, through(&ops, t), through(&ops, f)),
                Op::JeqX(t, f) => Op::JeqX(through(&ops, t), through(&ops, f)),
                Op::JgtX(t, f) => Op::JgtX(through(&ops, t), through(&ops, f)),
                Op::JgeX(t, f) => Op::JgeX(through(&ops, t), through(&ops, f)),
                op => op,
            };
        }
        for i in 0..ops.len().saturating_sub(1) {
            if let Op::JeqK(c, t, f) = ops[i + 1] {
                ops[i] = match ops[i] {
                    Op::LdAbs1(k) => Op::LdAbs1Jeq(k, c, t, f),
                    Op::LdAbs2(k) => Op::LdAbs2Jeq(k, c, t, f),
                    Op::LdAbs4(k) => Op::LdAbs4Jeq(k, c, t, f),
                    Op::LdInd1(k) => Op::LdInd1Jeq(k, c, t, f),
                    Op::LdInd2(k) => Op::LdInd2Jeq(k, c, t, f),
                    Op::LdInd4(k) => Op::LdInd4Jeq(k, c, t, f),
                    op => op,
                };
            }
        }
        ops
    }

    /// Decodes instruction `i` of a checked program.
    fn decode(i: usize, insn: Insn) -> Op {
        let k = insn.k;
        let next = i as u32 + 1;
        let (t, f) = (next + u32::from(insn.jt), next + u32::from(insn.jf));
        let slot = (k % MEM_WORDS) as u8;
        match insn.code {
            LD_B_ABS => Op::LdAbs1(k),
            LD_H_ABS => Op::LdAbs2(k),
            LD_W_ABS => Op::LdAbs4(k),
            LD_B_IND => Op::LdInd1(k),
            LD_H_IND => Op::LdInd2(k),
            LD_W_IND => Op::LdInd4(k),
            LD_W_LEN => Op::LdLen,
            LD_IMM => Op::LdImm(k),
            LD_MEM => Op::LdMem(slot),
            LDX_IMM => Op::LdxImm(k),
            LDX_MEM => Op::LdxMem(slot),
            ST => Op::St(slot),
            STX => Op::Stx(slot),
            ALU_ADD_K => Op::AddK(k),
            ALU_ADD_X => Op::AddX,
            ALU_SUB_K => Op::SubK(k),
            ALU_MOD_K => Op::ModK(k),
            TAX => Op::Tax,
            TXA => Op::Txa,
            JA => Op::Ja(next + k),
            JEQ_K => Op::JeqK(k, t, f),
            JGT_K => Op::JgtK(k, t, f),
            JGE_K => Op::JgeK(k, t, f),
            JEQ_X => Op::JeqX(t, f),
            JGT_X => Op::JgtX(t, f),
            JGE_X => Op::JgeX(t, f),
            RET_K => Op::RetK(k),
            // RET_A; `check` refused every other opcode.
            _ => Op::RetA,
        }
    }
}

/// `N` bytes of `p` at `at` (`at` may exceed `usize` on no target: it is a `u64` sum of `u32`s).
#[inline(always)]
fn bytes<const N: usize>(p: &[u8], at: u64) -> Option<[u8; N]> {
    let at = usize::try_from(at).ok()?;
    p.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// The big-endian value of the `N` (1, 2 or 4) bytes of `p` at `at`, as a load puts it in A.
#[inline(always)]
fn load<const N: usize>(p: &[u8], at: u64) -> Option<u32> {
    bytes::<N>(p, at).map(|b| {
        let mut w = [0u8; 4];
        w[4 - N..].copy_from_slice(&b);
        u32::from_be_bytes(w)
    })
}

/// Why a program would not attach.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// No instructions, or more than [`MAX_INSNS`].
    #[error("a program has 1 to {MAX_INSNS} instructions, not {0}")]
    Length(usize),
    /// An instruction this module does not know.
    #[error("instruction {0}: unsupported opcode {1:#06x}")]
    Opcode(usize, u16),
    /// A jump past the last instruction.
    #[error("instruction {0}: jumps past the end")]
    Jump(usize),
    /// A scratch slot out of range, or read before every path to it wrote it.
    #[error("instruction {0}: scratch slot M[{1}] out of range or read before it is written")]
    Memory(usize, u32),
    /// `mod #0`.
    #[error("instruction {0}: modulo by zero")]
    DivZero(usize),
    /// The last instruction does not return.
    #[error("the last instruction does not return")]
    NoReturn,
}

impl Program {
    /// Checks `insns` and wraps them.
    pub fn new(insns: Vec<Insn>) -> Result<Program, ProgramError> {
        Program::check(&insns)?;
        Ok(Program { ops: Op::decode_all(&insns), insns })
    }

    /// What the kernel's classic checker demands: 1 to 4096 instructions, known opcodes, jumps
    /// that stay inside, no `mod #0`, scratch slots below 16 and written on every path before
    /// they are read, and a return at the end.
    pub fn check(insns: &[Insn]) -> Result<(), ProgramError> {
        let n = insns.len();
        if n == 0 || n > MAX_INSNS {
            return Err(ProgramError::Length(n));
        }
        if !matches!(insns[n - 1].code, RET_K | RET_A) {
            return Err(ProgramError::NoReturn);
        }
        // Slots written on every path to each instruction (all ones: not reached yet).
        let mut written = vec![u16::MAX; n];
        written[0] = 0;
        for (i, insn) in insns.iter().enumerate() {
            let mut w = written[i];
            match insn.code {
                LD_MEM | LDX_MEM | ST | STX => {
                    if insn.k >= MEM_WORDS {
                        return Err(ProgramError::Memory(i, insn.k));
                    }
                    if matches!(insn.code, LD_MEM | LDX_MEM) && w & (1 << insn.k) == 0 {
                        return Err(ProgramError::Memory(i, insn.k));
                    }
                    if matches!(insn.code, ST | STX) {
                        w |= 1 << insn.k;
                    }
                }
                ALU_MOD_K if insn.k == 0 => return Err(ProgramError::DivZero(i)),
                LD_W_ABS | LD_H_ABS | LD_B_ABS | LD_W_IND | LD_H_IND | LD_B_IND | LD_W_LEN | LD_IMM | LDX_IMM
                | ALU_ADD_K | ALU_ADD_X | ALU_SUB_K | ALU_MOD_K | TAX | TXA | JA | JEQ_K | JGT_K | JGE_K | JEQ_X
                | JGT_X | JGE_X | RET_K | RET_A => {}
                c => return Err(ProgramError::Opcode(i, c)),
            }
            let mut flow = |to: usize| -> Result<(), ProgramError> {
                let slot = written.get_mut(to).ok_or(ProgramError::Jump(i))?;
                *slot &= w;
                Ok(())
            };
            match insn.code {
                RET_K | RET_A => {}
                JA => flow((i + 1).checked_add(insn.k as usize).ok_or(ProgramError::Jump(i))?)?,
                _ if insn.is_cond_jump() => {
                    flow(i + 1 + usize::from(insn.jt))?;
                    flow(i + 1 + usize::from(insn.jf))?;
                }
                _ => flow(i + 1)?,
            }
        }
        Ok(())
    }

    /// The instructions.
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// Number of instructions.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// Whether the program is empty (never: a checked program has an instruction).
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// Runs the program on a payload, as the kernel does: the value it returns (0 when a load
    /// reads past the payload's end). It runs the decoded instructions (absolute jump targets,
    /// operand sizes resolved once); [`run_reference`](Self::run_reference) is its plain twin.
    pub fn run(&self, payload: &[u8]) -> u32 {
        let (mut a, mut x) = (0u32, 0u32);
        let mut mem = [0u32; MEM_WORDS as usize];
        let mut pc = 0usize;
        let ind = |x: u32, k: u32| u64::from(x) + u64::from(k);
        let pick = |c: bool, t: u32, f: u32| (if c { t } else { f }) as usize;
        // Checked programs only jump forward and end in a return: the loop ends.
        while let Some(&op) = self.ops.get(pc) {
            pc += 1;
            match op {
                Op::LdAbs1(k) => match load::<1>(payload, u64::from(k)) {
                    Some(v) => a = v,
                    None => return 0,
                },
                Op::LdAbs2(k) => match load::<2>(payload, u64::from(k)) {
                    Some(v) => a = v,
                    None => return 0,
                },
                Op::LdAbs4(k) => match load::<4>(payload, u64::from(k)) {
                    Some(v) => a = v,
                    None => return 0,
                },
                Op::LdInd1(k) => match load::<1>(payload, ind(x, k)) {
                    Some(v) => a = v,
                    None => return 0,
                },
                Op::LdInd2(k) => match load::<2>(payload, ind(x, k)) {
                    Some(v) => a = v,
                    None => return 0,
                },
                Op::LdInd4(k) => match load::<4>(payload, ind(x, k)) {
                    Some(v) => a = v,
                    None => return 0,
                },
                Op::LdLen => a = payload.len() as u32,
                Op::LdImm(k) => a = k,
                Op::LdMem(m) => a = mem[usize::from(m)],
                Op::LdxImm(k) => x = k,
                Op::LdxMem(m) => x = mem[usize::from(m)],
                Op::St(m) => mem[usize::from(m)] = a,
                Op::Stx(m) => mem[usize::from(m)] = x,
                Op::AddK(k) => a = a.wrapping_add(k),
                Op::AddX => a = a.wrapping_add(x),
                Op::SubK(k) => a = a.wrapping_sub(k),
                Op::ModK(k) => a = a.checked_rem(k).unwrap_or(0),
                Op::Tax => x = a,
                Op::Txa => a = x,
                Op::Ja(t) => pc = t as usize,
                Op::JeqK(k, t, f) => pc = pick(a == k, t, f),
                Op::JgtK(k, t, f) => pc = pick(a > k, t, f),
                Op::JgeK(k, t, f) => pc = pick(a >= k, t, f),
                Op::JeqX(t, f) => pc = pick(a == x, t, f),
                Op::JgtX(t, f) => pc = pick(a > x, t, f),
                Op::JgeX(t, f) => pc = pick(a >= x, t, f),
                Op::RetK(k) => return k,
                Op::RetA => return a,
                Op::LdAbs1Jeq(k, c, t, f) => match load::<1>(payload, u64::from(k)) {
                    Some(v) => {
                        a = v;
                        pc = pick(a == c, t, f);
                    }
                    None => return 0,
                },
                Op::LdAbs2Jeq(k, c, t, f) => match load::<2>(payload, u64::from(k)) {
                    Some(v) => {
                        a = v;
                        pc = pick(a == c, t, f);
                    }
                    None => return 0,
                },
                Op::LdAbs4Jeq(k, c, t, f) => match load::<4>(payload, u64::from(k)) {
                    Some(v) => {
                        a = v;
                        pc = pick(a == c, t, f);
                    }
                    None => return 0,
                },
                Op::LdInd1Jeq(k, c, t, f) => match load::<1>(payload, ind(x, k)) {
                    Some(v) => {
                        a = v;
                        pc = pick(a == c, t, f);
                    }
                    None => return 0,
                },
                Op::LdInd2Jeq(k, c, t, f) => match load::<2>(payload, ind(x, k)) {
                    Some(v) => {
                        a = v;
                        pc = pick(a == c, t, f);
                    }
                    None => return 0,
                },
                Op::LdInd4Jeq(k, c, t, f) => match load::<4>(payload, ind(x, k)) {
                    Some(v) => {
                        a = v;
                        pc = pick(a == c, t, f);
                    }
                    None => return 0,
                },
            }
        }
        0
    }

    /// The plain interpreter: decodes each instruction as it goes. [`run`](Self::run)'s twin.
    pub fn run_reference(&self, payload: &[u8]) -> u32 {
        let (mut a, mut x) = (0u32, 0u32);
        let mut mem = [0u32; MEM_WORDS as usize];
        let mut pc = 0usize;
        let load = |at: u64, size: usize| -> Option<u32> {
            let at = usize::try_from(at).ok()?;
            let b = payload.get(at..at.checked_add(size)?)?;
            Some(b.iter().fold(0u32, |v, &c| (v << 8) | u32::from(c)))
        };
        // Checked programs only jump forward and end in a return: the loop ends.
        while let Some(&insn) = self.insns.get(pc) {
            pc += 1;
            let k = insn.k;
            let ind = u64::from(x) + u64::from(k);
            let jump = |cond: bool| if cond { usize::from(insn.jt) } else { usize::from(insn.jf) };
            match insn.code {
                LD_B_ABS | LD_H_ABS | LD_W_ABS | LD_B_IND | LD_H_IND | LD_W_IND => {
                    let at = if insn.code & 0x60 == 0x40 { ind } else { u64::from(k) };
                    let size = match insn.code & 0x18 {
                        0x10 => 1,
                        0x08 => 2,
                        _ => 4,
                    };
                    match load(at, size) {
                        Some(v) => a = v,
                        None => return 0,
                    }
                }
                LD_W_LEN => a = payload.len() as u32,
                LD_IMM => a = k,
                LD_MEM => a = mem[(k % MEM_WORDS) as usize],
                LDX_IMM => x = k,
                LDX_MEM => x = mem[(k % MEM_WORDS) as usize],
                ST => mem[(k % MEM_WORDS) as usize] = a,
                STX => mem[(k % MEM_WORDS) as usize] = x,
                ALU_ADD_K => a = a.wrapping_add(k),
                ALU_ADD_X => a = a.wrapping_add(x),
                ALU_SUB_K => a = a.wrapping_sub(k),
                ALU_MOD_K => a = a.checked_rem(k).unwrap_or(0),
                TAX => x = a,
                TXA => a = x,
                JA => pc += k as usize,
                JEQ_K => pc += jump(a == k),
                JGT_K => pc += jump(a > k),
                JGE_K => pc += jump(a >= k),
                JEQ_X => pc += jump(a == x),
                JGT_X => pc += jump(a > x),
                JGE_X => pc += jump(a >= x),
                RET_K => return k,
                RET_A => return a,
                _ => return 0,
            }
        }
        0
    }
}

impl fmt::Display for Program {
    /// One instruction per line, numbered, as `bpf_dbg` prints them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, insn) in self.insns.iter().enumerate() {
            writeln!(f, "{i:4}: {insn}")?;
        }
        Ok(())
    }
}

/// Builds a program with forward labels. A conditional jump to a label is one instruction when
/// the label lies within the 255 instructions its `jt`/`jf` can skip, and goes through a `ja`
/// otherwise ([`finish`](Assembler::finish) lays the program out until every jump fits), so no
/// jump is limited in reach and near ones cost nothing extra.
#[derive(Debug, Default)]
pub struct Assembler {
    items: Vec<Item>,
    /// Each label's item index, once bound.
    labels: Vec<Option<usize>>,
}

#[derive(Debug, Clone, Copy)]
enum Item {
    Insn(Insn),
    /// `ja` to a label.
    Goto(Label),
    /// A conditional jump to a label: taken when `cmp` holds (`when`) or does not (`unless`).
    Branch {
        cmp: Cmp,
        taken_if: bool,
        to: Label,
    },
}

/// A place in a program being assembled, bound once with [`Assembler::bind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

/// A comparison of `A` with a constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `A == k`.
    Eq(u32),
    /// `A >= k`.
    Ge(u32),
    /// `A > k`.
    Gt(u32),
    /// `A > X`.
    GtX,
}

impl Cmp {
    fn insn(self, jt: u8, jf: u8) -> Insn {
        match self {
            Cmp::Eq(k) => Insn::jeq(k, jt, jf),
            Cmp::Ge(k) => Insn::jge(k, jt, jf),
            Cmp::Gt(k) => Insn::jgt(k, jt, jf),
            Cmp::GtX => Insn::jgt_x(jt, jf),
        }
    }
}

impl Assembler {
    /// An empty program.
    pub fn new() -> Assembler {
        Assembler::default()
    }

    /// Items so far (a far conditional jump will take two instructions).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing was emitted yet.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// A new label, bound later.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `l` to the next instruction.
    pub fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.items.len());
    }

    /// Emits one instruction.
    pub fn emit(&mut self, insn: Insn) {
        self.items.push(Item::Insn(insn));
    }

    /// Goes to `l`.
    pub fn goto(&mut self, l: Label) {
        self.items.push(Item::Goto(l));
    }

    /// Goes to `l` unless `cmp` holds (then falls through).
    pub fn unless(&mut self, cmp: Cmp, l: Label) {
        self.items.push(Item::Branch { cmp, taken_if: false, to: l });
    }

    /// Goes to `l` if `cmp` holds.
    pub fn when(&mut self, cmp: Cmp, l: Label) {
        self.items.push(Item::Branch { cmp, taken_if: true, to: l });
    }

    /// Lays the program out, resolves the labels and checks the program.
    pub fn finish(self) -> Result<Program, ProgramError> {
        let n = self.items.len();
        // Where each label points, as an item index; every jump must go forward.
        let mut target = Vec::with_capacity(n);
        for (i, item) in self.items.iter().enumerate() {
            let to = match item {
                Item::Insn(_) => None,
                Item::Goto(l) | Item::Branch { to: l, .. } => match self.labels[l.0] {
                    Some(t) if t > i => Some(t),
                    _ => return Err(ProgramError::Jump(i)),
                },
            };
            target.push(to);
        }
        // Far branches take a `ja`; making one far only lengthens others, so this settles.
        let mut far = vec![false; n];
        let mut at = vec![0usize; n + 1];
        loop {
            for i in 0..n {
                at[i + 1] = at[i] + if far[i] { 2 } else { 1 };
            }
            let mut changed = false;
            for i in 0..n {
                if let (Item::Branch { .. }, Some(t), false) = (self.items[i], target[i], far[i])
                    && at[t] - at[i] - 1 > usize::from(u8::MAX)
                {
                    far[i] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut insns = Vec::with_capacity(at[n]);
        for (i, item) in self.items.iter().enumerate() {
            match *item {
                Item::Insn(insn) => insns.push(insn),
                Item::Goto(_) => insns.push(Insn::ja((at[target[i].expect("a goto's target")] - at[i] - 1) as u32)),
                Item::Branch { cmp, taken_if, .. } => {
                    let t = at[target[i].expect("a branch's target")];
                    if far[i] {
                        // The branch not taken skips the `ja` that follows.
                        let (jt, jf) = if taken_if { (0, 1) } else { (1, 0) };
                        insns.push(cmp.insn(jt, jf));
                        insns.push(Insn::ja((t - at[i] - 2) as u32));
                    } else {
                        let d = (t - at[i] - 1) as u8;
                        let (jt, jf) = if taken_if { (d, 0) } else { (0, d) };
                        insns.push(cmp.insn(jt, jf));
                    }
                }
            }
        }
        Program::new(insns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interpreter_loads_big_endian_and_returns_zero_past_the_end() {
        let p = Program::new(vec![Insn::ld_w_abs(1), Insn::ret_a()]).unwrap();
        assert_eq!(p.run(&[0, 1, 2, 3, 4]), 0x0102_0304);
        assert_eq!(p.run(&[0, 1, 2, 3]), 0);
        let p = Program::new(vec![Insn::ldx_imm(2), Insn::ld_h_ind(1), Insn::ret_a()]).unwrap();
        assert_eq!(p.run(&[0, 0, 0, 0xab, 0xcd]), 0xabcd);
        assert_eq!(p.run(&[0, 0, 0, 0xab]), 0);
    }

    #[test]
    fn the_checker_refuses_what_the_kernel_refuses() {
        assert_eq!(Program::new(vec![]), Err(ProgramError::Length(0)));
        assert_eq!(Program::new(vec![Insn::ld_imm(1)]), Err(ProgramError::NoReturn));
        assert_eq!(Program::new(vec![Insn::ja(5), Insn::ret_k(0)]), Err(ProgramError::Jump(0)));
        assert_eq!(Program::new(vec![Insn::alu_mod_k(0), Insn::ret_a()]), Err(ProgramError::DivZero(0)));
        assert_eq!(Program::new(vec![Insn::ld_mem(3), Insn::ret_a()]), Err(ProgramError::Memory(0, 3)));
        assert_eq!(Program::new(vec![Insn::st(16), Insn::ret_a()]), Err(ProgramError::Memory(0, 16)));
        // A slot written on only one of two paths may not be read where they meet.
        let one_path = vec![Insn::ld_len(), Insn::jeq(0, 0, 1), Insn::st(2), Insn::ld_mem(2), Insn::ret_a()];
        assert_eq!(Program::new(one_path), Err(ProgramError::Memory(3, 2)));
        let both = vec![Insn::ld_len(), Insn::st(2), Insn::jeq(0, 0, 1), Insn::st(3), Insn::ld_mem(2), Insn::ret_a()];
        assert!(Program::new(both).is_ok());
    }

    #[test]
    fn threaded_jumps_and_fused_loads_keep_their_meaning() {
        // 0: A = len; 1: jeq 3 → 2 (ja chain to 6) else 4 (the fused load's own jeq slot).
        let insns = vec![
            Insn::ld_len(),
            Insn::jeq(3, 0, 2),
            Insn::ja(0),
            Insn::ja(2),
            Insn::ld_b_abs(1),
            Insn::jeq(9, 1, 0),
            Insn::ret_k(1),
            Insn::ret_k(2),
        ];
        // Slot 4 fuses `ld [1]; jeq #9`; slot 5 is still a plain `jeq` that a jump may reach.
        let p = Program::new(insns).unwrap();
        assert!(matches!(p.ops[4], Op::LdAbs1Jeq(1, 9, 7, 6)), "{:?}", p.ops[4]);
        assert!(matches!(p.ops[1], Op::JeqK(3, 6, 4)), "{:?}", p.ops[1]);
        for pl in [&[0u8, 0, 0][..], &[0, 9], &[0, 8], &[0], &[]] {
            assert_eq!(p.run(pl), p.run_reference(pl), "{pl:?}");
        }
        assert_eq!(p.run(&[0, 9]), 2);
        assert_eq!(p.run(&[0, 0, 0]), 1);
    }

    proptest::proptest! {
        /// Random checked programs of every supported opcode: the decoded interpreter returns
        /// what the plain one does, on random payloads.
        #[test]
        fn run_agrees_with_run_reference(
            raw in proptest::collection::vec((0usize..28, 0u8..4, 0u8..4, 0u32..40), 1..40),
            payloads in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48), 1..8),
        ) {
            const CODES: [u16; 28] = [
                LD_W_ABS, LD_H_ABS, LD_B_ABS, LD_W_IND, LD_H_IND, LD_B_IND, LD_W_LEN, LD_IMM, LD_MEM, LDX_IMM,
                LDX_MEM, ST, STX, ALU_ADD_K, ALU_ADD_X, ALU_SUB_K, ALU_MOD_K, JA, JEQ_K, JGT_K, JGE_K, JEQ_X,
                JGT_X, JGE_X, RET_K, RET_A, TAX, TXA,
            ];
            let n = raw.len();
            let mut insns: Vec<Insn> = raw
                .iter()
                .enumerate()
                .map(|(i, &(c, jt, jf, k))| {
                    let code = CODES[c];
                    let left = (n - i) as u32; // instructions after this one, the final return included
                    let k = match code {
                        LD_MEM | LDX_MEM | ST | STX => k % MEM_WORDS,
                        ALU_MOD_K => k % 7 + 1,
                        JA => k % left,
                        _ => k,
                    };
                    let cap = |j: u8| (u32::from(j) % left) as u8;
                    Insn { code, jt: cap(jt), jf: cap(jf), k }
                })
                .collect();
            insns.push(Insn::ret_a());
            // Programs the checker refuses (a slot read before it is written) are skipped.
            if let Ok(p) = Program::new(insns) {
                for pl in &payloads {
                    proptest::prop_assert_eq!(p.run(pl), p.run_reference(pl), "{}", p);
                }
            }
        }
    }

    #[test]
    fn labels_reach_past_255_instructions() {
        let mut a = Assembler::new();
        let far = a.label();
        a.emit(Insn::ld_b_abs(0));
        a.unless(Cmp::Eq(7), far);
        for _ in 0..600 {
            a.emit(Insn::alu_add_k(1));
        }
        a.emit(Insn::ret_a());
        a.bind(far);
        a.emit(Insn::ret_k(99));
        let p = a.finish().unwrap();
        // ld, the far branch as a jump and a `ja`, 600 adds, two returns.
        assert_eq!(p.len(), 1 + 2 + 600 + 2);
        assert_eq!(p.run(&[7]), 607);
        assert_eq!(p.run(&[8]), 99);
        assert_eq!(p.run(&[]), 0);
        // Near, both senses: one instruction each.
        let mut a = Assembler::new();
        let (no, yes) = (a.label(), a.label());
        a.emit(Insn::ld_b_abs(0));
        a.when(Cmp::Gt(9), yes);
        a.unless(Cmp::Eq(3), no);
        a.emit(Insn::ret_k(3));
        a.bind(no);
        a.emit(Insn::ret_k(0));
        a.bind(yes);
        a.emit(Insn::ret_k(10));
        let p = a.finish().unwrap();
        assert_eq!(p.len(), 6);
        assert_eq!([p.run(&[3]), p.run(&[4]), p.run(&[12])], [3, 0, 10]);
    }
}
