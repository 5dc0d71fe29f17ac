//! Memory for decoded values: chunks (4 KB by default) taken from two free-list pools, host and
//! device (RpcNIC §III-B: "two SRAM-based FIFOs ... store the free chunks"), and a per-message
//! arena that bump-allocates values in its chunks and gives them back when dropped.
//!
//! A value longer than a chunk gets a run of its own, as many chunks long as it needs (counted
//! as that many chunks); runs are freed, not kept on the free list. An arena keeps one free
//! chunk when its message is dropped (the memory, not the count: it is no longer out), and a
//! message body is kept per thread for the next message, so a thread decoding small messages
//! reuses the same chunk without taking the free list's lock.

use std::sync::atomic::{AtomicUsize, Ordering};
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
struct Shared {
    /// Free chunks.
    free: Mutex<Vec<Vec<u8>>>,
    /// Chunks handed out and not returned.
    out: AtomicUsize,
}

/// A free-list pool of equal chunks, bounded in how many may be out at once.
///
/// How many are out is one atomic counter (taken and given back once per arena fill and once
/// per message); the free list is behind a lock, and each arena keeps one free chunk of its own
/// (see [`Arena`]), so that a thread decoding small messages one after another takes the lock
/// only when a message needs more than one chunk.
#[derive(Debug, Clone)]
pub struct ChunkPool {
    inner: Arc<Shared>,
    chunk: usize,
    limit: usize,
}

impl ChunkPool {
    /// A pool of `chunk`-byte chunks (at least 64), at most `limit` out at once.
    pub fn new(chunk: usize, limit: usize) -> ChunkPool {
        ChunkPool { inner: Arc::new(Shared::default()), chunk: chunk.max(64), limit }
    }

    /// Bytes per chunk.
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    /// Whether `other` is this pool (a clone of it).
    pub fn same_as(&self, other: &ChunkPool) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Chunks out now.
    pub fn outstanding(&self) -> usize {
        self.inner.out.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.inner.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts `n` chunks out, unless that would pass the limit.
    #[inline]
    fn reserve(&self, n: usize) -> bool {
        let limit = self.limit;
        self.inner
            .out
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| o.checked_add(n).filter(|&m| m <= limit))
            .is_ok()
    }

    /// Takes `n` chunks' worth, empty (capacity, no length: values are appended, never
    /// zeroed first): for one chunk, `spare` if it is one of this pool's size, else one from
    /// the free list; else (and for a run) fresh memory.
    fn take(&self, n: usize, spare: &mut Option<Vec<u8>>) -> Option<Vec<u8>> {
        if !self.reserve(n) {
            return None;
        }
        if n == 1 {
            if let Some(c) = spare.take_if(|c| c.capacity() == self.chunk) {
                return Some(c);
            }
            if let Some(c) = self.lock().pop() {
                return Some(c);
            }
        }
        Some(Vec::with_capacity(n * self.chunk))
    }

    /// Takes `n` chunks' worth as one empty buffer (a chunk from the free list for one, fresh
    /// memory for a run), counted out; `None` past the limit. Given back with
    /// [`give_run`](Self::give_run).
    pub(crate) fn take_run(&self, n: usize) -> Option<Vec<u8>> {
        self.take(n, &mut None)
    }

    /// Gives back a buffer [`take_run`](Self::take_run) counted as `n` chunks: a single chunk of
    /// this pool's size kept on the free list, anything else freed.
    pub(crate) fn give_run(&self, mut buf: Vec<u8>, n: usize) {
        self.inner.out.fetch_sub(n, Ordering::Relaxed);
        if n == 1 && buf.capacity() == self.chunk {
            buf.clear();
            let mut free = self.lock();
            if free.len() < 4096 {
                free.push(buf);
            }
        }
    }

    /// Gives chunks back: a run freed, a chunk kept as `spare` (when that is empty) or on the
    /// free list.
    pub(crate) fn give(&self, chunks: &mut Vec<Vec<u8>>, spare: &mut Option<Vec<u8>>) {
        if chunks.is_empty() {
            return;
        }
        // (An entry whose memory was taken out of its arena has none, and counts none.)
        let n: usize = chunks.iter().map(|c| c.capacity().div_ceil(self.chunk)).sum();
        self.inner.out.fetch_sub(n, Ordering::Relaxed);
        // Chunks (not runs) are kept: the first as `spare` when that is empty, the others on
        // the free list, whose lock is taken only if there are others.
        let mut free = None;
        for c in chunks.iter_mut().filter(|c| c.capacity() == self.chunk) {
            c.clear();
            if spare.is_none() {
                *spare = Some(std::mem::take(c));
                continue;
            }
            let free = free.get_or_insert_with(|| self.lock());
            if free.len() < 4096 {
                free.push(std::mem::take(c));
            }
        }
        drop(free);
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

/// Chunks of one pool owned by one message (which gives them back to their pool when dropped).
#[derive(Debug, Default)]
pub struct Arena {
    pub(crate) chunks: Vec<Vec<u8>>,
    /// The chunk being filled, and the bytes used in it.
    cur: Option<usize>,
    used: usize,
    /// Chunks taken (runs count as their length in chunks).
    pub(crate) chunks_taken: u64,
    /// One free chunk kept from the last message (memory only: it is not counted out).
    spare: Option<Vec<u8>>,
}

impl Arena {
    /// Copies `bytes` in, taking chunks from `pool`; `None` when the pool is exhausted.
    #[inline]
    pub fn push(&mut self, pool: &ChunkPool, bytes: &[u8]) -> Option<Span> {
        // The common case: the value fits the chunk being filled.
        if let Some(c) = self.cur
            && self.used + bytes.len() <= pool.chunk
            && let Some(chunk) = self.chunks.get_mut(c)
        {
            let off = self.used;
            crate::wire::extend_in_pieces(chunk, bytes);
            self.used += bytes.len();
            return Some(Span { chunk: c as u32, off: off as u32, len: bytes.len() as u32 });
        }
        self.push_new(pool, bytes)
    }

    /// [`push`](Self::push) into a new chunk, or a run of its own for a value longer than one.
    #[cold]
    #[inline(never)]
    fn push_new(&mut self, pool: &ChunkPool, bytes: &[u8]) -> Option<Span> {
        let size = pool.chunk;
        if bytes.len() > size {
            let n = bytes.len().div_ceil(size);
            let mut run = pool.take(n, &mut self.spare)?;
            crate::wire::extend_in_pieces(&mut run, bytes);
            self.chunks_taken += n as u64;
            // The chunk being filled stays the one being filled.
            self.chunks.push(run);
            return Some(Span { chunk: (self.chunks.len() - 1) as u32, off: 0, len: bytes.len() as u32 });
        }
        let mut c = pool.take(1, &mut self.spare)?;
        crate::wire::extend_in_pieces(&mut c, bytes);
        self.chunks.push(c);
        self.chunks_taken += 1;
        self.used = bytes.len();
        self.cur = Some(self.chunks.len() - 1);
        Some(Span { chunk: (self.chunks.len() - 1) as u32, off: 0, len: bytes.len() as u32 })
    }

    /// Takes over `buf`, `chunks` chunks already counted out of this arena's pool (a
    /// [`crate::cu::DeviceBuf`]'s memory), as a run of its own: the span of its bytes. Given
    /// back with the arena's other chunks.
    pub(crate) fn adopt(&mut self, buf: Vec<u8>, chunks: usize) -> Span {
        let len = buf.len() as u32;
        self.chunks_taken += chunks as u64;
        self.chunks.push(buf);
        Span { chunk: (self.chunks.len() - 1) as u32, off: 0, len }
    }

    /// Takes the memory of `s` out of the arena, if `s` has a chunk (or run) to itself and it is
    /// not the chunk being filled: the buffer and the chunks it counted, no longer the arena's.
    pub(crate) fn take_whole(&mut self, s: Span, pool: &ChunkPool) -> Option<(Vec<u8>, usize)> {
        let i = s.chunk as usize;
        let c = self.chunks.get(i)?;
        if self.cur == Some(i) || s.off != 0 || c.len() != s.len as usize || c.capacity() == 0 {
            return None;
        }
        let buf = std::mem::take(&mut self.chunks[i]);
        let n = buf.capacity().div_ceil(pool.chunk);
        self.chunks_taken = self.chunks_taken.saturating_sub(n as u64);
        Some((buf, n))
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

    /// Gives every chunk back to `pool`; the arena is empty again.
    pub fn release(&mut self, pool: &ChunkPool) {
        pool.give(&mut self.chunks, &mut self.spare);
        self.reset();
    }

    /// Forgets the chunks (already given back).
    fn reset(&mut self) {
        self.chunks.clear();
        self.cur = None;
        self.used = 0;
        self.chunks_taken = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_chunks_and_go_back_to_the_pool() {
        let pool = ChunkPool::new(64, 5);
        {
            let mut a = Arena::default();
            let x = a.push(&pool, b"hello").unwrap();
            let y = a.push(&pool, &[7u8; 60]).unwrap(); // does not fit the first chunk: a second
            let big = a.push(&pool, &[9u8; 130]).unwrap(); // a run of 3 chunks
            assert_eq!(a.get(x), b"hello");
            assert_eq!(a.get(y), &[7u8; 60][..]);
            assert_eq!(a.get(big), &[9u8; 130][..]);
            // The chunk being filled keeps filling after the run.
            let z = a.push(&pool, b"!").unwrap();
            assert_eq!((a.get(z), z.chunk, z.off), (&b"!"[..], y.chunk, 60));
            assert_eq!((a.get(x), a.get(y)), (&b"hello"[..], &[7u8; 60][..]));
            assert_eq!(a.chunks_taken, 5);
            assert_eq!(pool.outstanding(), 5);
            // The pool's limit (5 chunks out) is reached: a value needing a new chunk is refused.
            assert!(a.push(&pool, &[1u8; 64]).is_none());
            a.release(&pool);
            assert_eq!(pool.outstanding(), 0);
            // One chunk stayed with the arena as its spare, the other went to the free list.
            assert_eq!((a.spare.as_ref().map(Vec::capacity), pool.lock().len()), (Some(64), 1));
            let w = a.push(&pool, b"again").unwrap();
            assert_eq!((a.get(w), a.chunks_taken, pool.outstanding()), (&b"again"[..], 1, 1));
            assert!(a.spare.is_none(), "the spare was taken first");
            a.release(&pool);
        }
        assert_eq!(pool.outstanding(), 0);
    }

    #[test]
    fn threads_sharing_a_pool_never_pass_its_limit() {
        let pool = ChunkPool::new(64, 3);
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let pool = &pool;
                s.spawn(move || {
                    let mut a = Arena::default();
                    for i in 0..2000 {
                        // One or two chunks each round; refused whenever the others hold the rest.
                        let _ = a.push(pool, &[t; 40]);
                        if i % 2 == 0 {
                            let _ = a.push(pool, &[t; 40]);
                        }
                        assert!(pool.outstanding() <= 3);
                        a.release(pool);
                    }
                });
            }
        });
        assert_eq!(pool.outstanding(), 0);
    }
}
