//! A session's output buffer: the replies ready for its client, in order, as a queue of
//! chunks of at most [`CHUNK`] bytes.
//!
//! One contiguous buffer would have to grow by doubling while a slow client leaves replies in
//! it: every step copies what is there, and past the allocator's large-object size every new
//! buffer is fresh pages the kernel must zero. With many such clients at once that costs the
//! worker more than the replies themselves. Chunks are allocated once, filled once and written
//! once, and are small enough for the allocator to hand the same memory back over and over.
//!
//! The writer takes a batch of chunks at a time ([`Output::take`]) and writes them with one
//! vectored write; the chunk being filled is swapped for the writer's emptied one, so the
//! common case of a few small replies costs no allocation.

use std::collections::VecDeque;

/// Bytes a chunk holds before the next one is started (below the allocator's large-object
/// size, so chunks are recycled from its free lists rather than mapped and zeroed afresh).
pub const CHUNK: usize = 64 * 1024;

/// Chunks handed to the writer at once (one vectored write of up to 1 MiB).
pub const MAX_BATCH: usize = 16;

/// Replies ready for the client: sealed chunks, oldest first, then the chunk being filled.
#[derive(Default)]
pub struct Output {
    /// Full chunks, each with the number of replies that end in it.
    sealed: VecDeque<(Vec<u8>, usize)>,
    /// The chunk replies are appended to.
    tail: Vec<u8>,
    /// Replies that end in `tail`.
    tail_replies: usize,
    /// Bytes in `sealed` and `tail`.
    len: usize,
}

impl Output {
    /// Bytes waiting to be taken.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing waits to be taken.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `bytes`, part of a reply or frame; [`Output::end_reply`] counts a reply once its
    /// last bytes are in.
    #[inline]
    pub fn extend(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len();
        loop {
            let room = CHUNK.saturating_sub(self.tail.len());
            if bytes.len() <= room {
                self.tail.extend_from_slice(bytes);
                return;
            }
            let (now, rest) = bytes.split_at(room);
            self.tail.extend_from_slice(now);
            bytes = rest;
            self.seal();
        }
    }

    /// Counts one reply whose bytes have all been appended.
    #[inline]
    pub fn end_reply(&mut self) {
        self.tail_replies += 1;
    }

    /// Moves the full tail to the sealed chunks and starts a new one, sized for a full chunk at
    /// once (a tail that fills up is part of a large output).
    fn seal(&mut self) {
        let full = std::mem::replace(&mut self.tail, Vec::with_capacity(CHUNK));
        let n = std::mem::take(&mut self.tail_replies);
        self.sealed.push_back((full, n));
    }

    /// Moves what waits, oldest first, into `batch` (empty on entry): up to [`MAX_BATCH`]
    /// chunks, the tail among them when every sealed chunk fits, `spare` (an emptied buffer of
    /// the writer's) becoming the new tail. Returns the bytes and the replies that end in
    /// them; `(0, 0)` when nothing waits.
    pub fn take(&mut self, batch: &mut Vec<Vec<u8>>, spare: &mut Vec<u8>) -> (usize, usize) {
        let (mut bytes, mut replies) = (0, 0);
        while batch.len() < MAX_BATCH
            && let Some((chunk, n)) = self.sealed.pop_front()
        {
            bytes += chunk.len();
            replies += n;
            batch.push(chunk);
        }
        if self.sealed.is_empty() && !self.tail.is_empty() && batch.len() < MAX_BATCH {
            bytes += self.tail.len();
            replies += std::mem::take(&mut self.tail_replies);
            batch.push(std::mem::replace(&mut self.tail, std::mem::take(spare)));
        }
        self.len -= bytes;
        (bytes, replies)
    }

    /// Drops everything; returns the bytes and replies dropped.
    pub fn clear(&mut self) -> (usize, usize) {
        let dropped = (self.len, self.replies());
        *self = Output::default();
        dropped
    }

    /// Replies that end in what waits.
    fn replies(&self) -> usize {
        self.tail_replies + self.sealed.iter().map(|(_, n)| n).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes batches until nothing waits: the bytes, the replies, each batch's chunk sizes.
    fn drain(out: &mut Output) -> (Vec<u8>, usize, Vec<Vec<usize>>) {
        let (mut bytes, mut replies, mut sizes) = (Vec::new(), 0, Vec::new());
        loop {
            let mut batch = Vec::new();
            let (len, n) = out.take(&mut batch, &mut Vec::new());
            if batch.is_empty() {
                assert_eq!((len, n), (0, 0));
                return (bytes, replies, sizes);
            }
            assert_eq!(len, batch.iter().map(Vec::len).sum::<usize>());
            sizes.push(batch.iter().map(Vec::len).collect());
            batch.iter().for_each(|c| bytes.extend_from_slice(c));
            replies += n;
        }
    }

    #[test]
    fn small_replies_stay_in_one_chunk_and_come_out_whole() {
        let mut out = Output::default();
        out.extend(b"+OK\r\n");
        out.end_reply();
        out.extend(b"$1\r\na\r\n");
        out.end_reply();
        assert_eq!(out.len(), 12);
        assert_eq!(out.sealed.len(), 0);
        let (bytes, replies, sizes) = drain(&mut out);
        assert_eq!(bytes, b"+OK\r\n$1\r\na\r\n");
        assert_eq!((replies, sizes), (2, vec![vec![12]]));
        assert!(out.is_empty());
    }

    #[test]
    fn a_large_reply_is_cut_into_chunks_that_go_out_together() {
        let mut out = Output::default();
        out.extend(b"+first\r\n");
        out.end_reply();
        let big: Vec<u8> = (0..(2 * CHUNK + 100)).map(|i| (i % 251) as u8).collect();
        out.extend(&big);
        out.end_reply();
        out.extend(b"+last\r\n");
        out.end_reply();
        assert_eq!(out.len(), 8 + big.len() + 7);
        let (bytes, replies, sizes) = drain(&mut out);
        let mut want = b"+first\r\n".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"+last\r\n");
        assert_eq!(bytes, want);
        assert_eq!(replies, 3);
        assert_eq!(sizes, vec![vec![CHUNK, CHUNK, 8 + 100 + 7]]);
    }

    #[test]
    fn a_batch_holds_at_most_max_batch_chunks_and_counts_the_replies_ending_in_it() {
        let mut out = Output::default();
        for _ in 0..(MAX_BATCH + 2) {
            out.extend(&vec![b'x'; CHUNK]);
            out.end_reply();
        }
        out.extend(b"+tail\r\n");
        out.end_reply();
        let mut batch = Vec::new();
        // Reply i fills chunk i exactly and is counted with it.
        assert_eq!(
            out.take(&mut batch, &mut Vec::new()),
            (MAX_BATCH * CHUNK, MAX_BATCH)
        );
        assert_eq!(batch.len(), MAX_BATCH);
        let (bytes, replies, sizes) = drain(&mut out);
        assert_eq!(bytes.len(), 2 * CHUNK + 7);
        assert_eq!(replies, 3);
        assert_eq!(sizes, vec![vec![CHUNK, CHUNK, 7]]);
    }

    #[test]
    fn clearing_counts_what_was_dropped() {
        let mut out = Output::default();
        for _ in 0..3 {
            out.extend(&vec![b'x'; CHUNK]);
            out.end_reply();
        }
        assert_eq!(out.clear(), (3 * CHUNK, 3));
        assert!(out.is_empty());
        assert_eq!(out.take(&mut Vec::new(), &mut Vec::new()), (0, 0));
    }

    #[test]
    fn the_writers_spare_becomes_the_tail() {
        let mut out = Output::default();
        out.extend(b"a");
        out.end_reply();
        let mut spare = Vec::with_capacity(4096);
        let mut batch = Vec::new();
        assert_eq!(out.take(&mut batch, &mut spare), (1, 1));
        assert_eq!(batch, vec![b"a".to_vec()]);
        assert_eq!(out.tail.capacity(), 4096);
        out.extend(b"b");
        out.end_reply();
        let (bytes, replies, _) = drain(&mut out);
        assert_eq!((bytes.as_slice(), replies), (&b"b"[..], 1));
    }
}
