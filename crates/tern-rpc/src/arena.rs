//! Memory for decoded values: chunks (4 KB by default) taken from two free-list pools, host and
//! device (RpcNIC §III-B: "two SRAM-based FIFOs ... store the free chunks"), and a per-message
//! arena that bump-allocates values in its chunks and gives them back when dropped.
//!
//! A value longer than a chunk gets a run of its own, as many chunks long as it needs (counted
//! as that many chunks); runs are freed, not kept on the free list.

use std::sync::{Arc, Mutex};

/// Which memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// Host memory.
    Host = 0,
    /// The NIC's device memory.
    Device = 1,
}

#[derive(Debug, Default)]
struct PoolInner {
    free: Vec<Vec<u8>>,
    /// Chunks handed out and not returned.
    out: usize,
}

/// A free-list pool of equal chunks, bounded in how many may be out at once.
#[derive(Debug, Clone)]
pub struct ChunkPool {
    inner: Arc<Mutex<PoolInner>>,
    chunk: usize,
    limit: usize,
}

impl ChunkPool {
    /// A pool of `chunk`-byte chunks (at least 64), at most `limit` out at once.
    pub fn new(chunk: usize, limit: usize) -> ChunkPool {
        ChunkPool { inner: Arc::new(Mutex::new(PoolInner::default())), chunk: chunk.max(64), limit }
    }

    /// Bytes per chunk.
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    /// Chunks out now.
    pub fn outstanding(&self) -> usize {
        self.lock().out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes `n` chunks' worth, empty (capacity, no length: values are appended, never
    /// zeroed first): one chunk from the free list (`n == 1`), or a fresh run.
    fn take(&self, n: usize) -> Option<Vec<u8>> {
        let reused = {
            let mut p = self.lock();
            if p.out + n > self.limit {
                return None;
            }
            p.out += n;
            if n == 1 { p.free.pop() } else { None }
        };
        Some(reused.unwrap_or_else(|| Vec::with_capacity(n * self.chunk)))
    }

    /// Gives chunks back (a run freed, a chunk kept on the free list).
    fn give(&self, chunks: &mut Vec<Vec<u8>>) {
        if chunks.is_empty() {
            return;
        }
        let mut p = self.lock();
        chunks.retain_mut(|c| {
            let n = c.capacity().div_ceil(self.chunk).max(1);
            p.out -= n;
            if n == 1 && p.free.len() < 4096 {
                c.clear();
                p.free.push(std::mem::take(c));
                return false;
            }
            true
        });
        drop(p);
        // Runs (and chunks past the free list's bound) are freed outside the lock.
        chunks.clear();
    }
}

/// A place in an arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Chunk index within the arena.
    pub chunk: u32,
    /// Offset in the chunk.
    pub off: u32,
    /// Length.
    pub len: u32,
}

/// Chunks of one pool owned by one message (which borrows the pool).
#[derive(Debug)]
pub struct Arena<'p> {
    pool: &'p ChunkPool,
    chunks: Vec<Vec<u8>>,
    /// The chunk being filled, and the bytes used in it.
    cur: Option<usize>,
    used: usize,
    /// Chunks taken (runs count as their length in chunks).
    pub(crate) chunks_taken: u64,
}

impl<'p> Arena<'p> {
    /// An empty arena over `pool`.
    pub fn new(pool: &'p ChunkPool) -> Arena<'p> {
        Arena { pool, chunks: Vec::new(), cur: None, used: 0, chunks_taken: 0 }
    }

    /// Copies `bytes` in; `None` when the pool is exhausted.
    #[inline]
    pub fn push(&mut self, bytes: &[u8]) -> Option<Span> {
        let size = self.pool.chunk;
        if bytes.len() > size {
            let n = bytes.len().div_ceil(size);
            let mut run = self.pool.take(n)?;
            run.extend_from_slice(bytes);
            self.chunks_taken += n as u64;
            // The chunk being filled stays the one being filled.
            self.chunks.push(run);
            return Some(Span { chunk: (self.chunks.len() - 1) as u32, off: 0, len: bytes.len() as u32 });
        }
        let chunk = match self.cur {
            Some(c) if self.used + bytes.len() <= size => c,
            _ => {
                let c = self.pool.take(1)?;
                self.chunks.push(c);
                self.chunks_taken += 1;
                self.used = 0;
                self.cur = Some(self.chunks.len() - 1);
                self.chunks.len() - 1
            }
        };
        let off = self.used;
        self.chunks[chunk].extend_from_slice(bytes);
        self.used += bytes.len();
        Some(Span { chunk: chunk as u32, off: off as u32, len: bytes.len() as u32 })
    }

    /// The bytes of `s`, if the arena has them.
    pub fn try_get(&self, s: Span) -> Option<&[u8]> {
        let c = self.chunks.get(s.chunk as usize)?;
        let end = s.off.checked_add(s.len)?;
        c.get(s.off as usize..end as usize)
    }

    /// The bytes of `s`.
    #[inline]
    pub fn get(&self, s: Span) -> &[u8] {
        let c = &self.chunks[s.chunk as usize];
        &c[s.off as usize..(s.off + s.len) as usize]
    }
}

impl Drop for Arena<'_> {
    fn drop(&mut self) {
        self.pool.give(&mut self.chunks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_chunks_and_go_back_to_the_pool() {
        let pool = ChunkPool::new(64, 5);
        {
            let mut a = Arena::new(&pool);
            let x = a.push(b"hello").unwrap();
            let y = a.push(&[7u8; 60]).unwrap(); // does not fit the first chunk: a second
            let big = a.push(&[9u8; 130]).unwrap(); // a run of 3 chunks
            assert_eq!(a.get(x), b"hello");
            assert_eq!(a.get(y), &[7u8; 60][..]);
            assert_eq!(a.get(big), &[9u8; 130][..]);
            // The chunk being filled keeps filling after the run.
            let z = a.push(b"!").unwrap();
            assert_eq!((a.get(z), z.chunk, z.off), (&b"!"[..], y.chunk, 60));
            assert_eq!((a.get(x), a.get(y)), (&b"hello"[..], &[7u8; 60][..]));
            assert_eq!(a.chunks_taken, 5);
            assert_eq!(pool.outstanding(), 5);
            // The pool's limit (5 chunks out) is reached: a value needing a new chunk is refused.
            assert!(a.push(&[1u8; 64]).is_none());
        }
        assert_eq!(pool.outstanding(), 0);
    }
}
