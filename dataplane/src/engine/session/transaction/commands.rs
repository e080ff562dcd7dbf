//! A transaction's commands as they are sent: the forwarded bytes of small commands, and the
//! frames of large ones (a 256 MiB `SET` inside MULTI) held as the client sent them, shared by
//! the exchange that sends them and the copy kept for a re-send, never copied (three copies of
//! such a value stalled the worker's other clients for 190 ms and held four times its size).

use std::rc::Rc;

use super::super::large::LARGE_REQUEST;
use crate::engine::budget::Budget;
use crate::upstream::Piece;

/// A large frame's memory is counted for the worker's trim (`Budget::released`) once its last
/// holder drops it.
struct Held {
    bytes: usize,
    budget: Rc<Budget>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.released(self.bytes);
    }
}

/// Commands in order: runs of forwarded bytes ([`Piece::Bytes`]) and held frames
/// ([`Piece::Shared`]), then the run being appended to.
#[derive(Default, Clone)]
pub(super) struct Commands {
    pieces: Vec<Piece>,
    tail: Vec<u8>,
    held: Vec<Rc<Held>>,
}

impl Commands {
    /// The buffer the next command's forwarded bytes are appended to.
    pub(super) fn own(&mut self) -> &mut Vec<u8> {
        &mut self.tail
    }

    /// What [`Commands::own`] got since its length was `from`.
    pub(super) fn tail(&self, from: usize) -> &[u8] {
        self.tail.get(from..).unwrap_or_default()
    }

    /// A large command's whole RESP frame (forwarded as sent), taken without a copy; its memory
    /// is counted in `budget`'s trim once the last copy of these commands goes.
    pub(super) fn frame(frame: Vec<u8>, budget: &Rc<Budget>) -> Commands {
        let held = Held {
            bytes: frame.capacity(),
            budget: budget.clone(),
        };
        Commands {
            pieces: vec![Piece::Shared(bytes::Bytes::from(frame))],
            tail: Vec::new(),
            held: vec![Rc::new(held)],
        }
    }

    /// Appends `other`'s commands (its frames shared, not copied).
    pub(super) fn append(&mut self, other: &Commands) {
        for p in &other.pieces {
            match p {
                Piece::Bytes(b) => self.tail.extend_from_slice(b),
                held => {
                    if !self.tail.is_empty() {
                        self.pieces
                            .push(Piece::Bytes(std::mem::take(&mut self.tail)));
                    }
                    self.pieces.push(held.clone());
                }
            }
        }
        self.tail.extend_from_slice(&other.tail);
        self.held.extend(other.held.iter().cloned());
    }

    /// Bytes in all.
    pub(super) fn len(&self) -> usize {
        let held: usize = self
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Bytes(b) => b.len(),
                Piece::Shared(b) => b.len(),
                Piece::Frame(r) => r.len(),
            })
            .sum();
        held + self.tail.len()
    }

    pub(super) fn clear(&mut self) {
        *self = Commands::default();
    }

    /// `before`, the commands and `after`: `Err` with them in one buffer when no frame is held
    /// and they are small (one write, as any exchange), else `Ok` with them as pieces to send.
    pub(super) fn framed(&self, before: &[u8], after: &[u8]) -> Result<Vec<Piece>, Vec<u8>> {
        if self.pieces.is_empty() {
            let mut out = Vec::with_capacity(before.len() + self.tail.len() + after.len());
            out.extend_from_slice(before);
            out.extend_from_slice(&self.tail);
            out.extend_from_slice(after);
            if out.len() < LARGE_REQUEST {
                return Err(out);
            }
            // Large commands copied in (a listener whose routes rewrite keys): written in
            // steps too, rather than under one `op_timeout` for hundreds of MiB.
            return Ok(vec![Piece::Shared(bytes::Bytes::from(out))]);
        }
        let mut pieces = Vec::with_capacity(self.pieces.len() + 2);
        pieces.push(Piece::Bytes(before.to_vec()));
        pieces.extend(self.pieces.iter().cloned());
        pieces.push(Piece::Bytes([self.tail.as_slice(), after].concat()));
        Ok(pieces)
    }
}
