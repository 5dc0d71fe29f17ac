//! What the root-only veth tests share: a veth pair removed on drop, `ip`, numbered frames.

use std::process::Command;

/// A veth pair, deleted (with its peer) when dropped.
pub struct Veth(pub String);

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

/// Runs `ip ARGS` (split on spaces); panics naming the command if it fails.
pub fn ip(args: &str) {
    let ok = Command::new("ip").args(args.split_whitespace()).status().map(|s| s.success()).unwrap_or(false);
    assert!(ok, "ip {args} failed");
}

/// A frame of `len` bytes with EtherType 0x88B5, numbered `seq` in its first payload bytes, the
/// rest a pattern of `seq`.
pub fn numbered(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xbb]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xaa]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (j, x) in f[18..].iter_mut().enumerate() {
        *x = (seq as usize * 7 + j) as u8;
    }
    f
}
