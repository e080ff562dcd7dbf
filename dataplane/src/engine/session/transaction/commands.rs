//! A transaction's commands as they are sent: the forwarded bytes of small commands, and the
//! frames of large ones (a 256 MiB `SET` inside MULTI) held as the client sent them, shared by
//! the exchange that sends them and the copy kept for a re-send, never copied (three copies of
//! such a value stalled the worker's other clients for 190 ms and held four times its size).

use std::rc::Rc;

use super::super::large::LARGE_REQUEST;
use crate::engine::sink::Sink;
use crate::upstream::Piece;

/// A large frame's memory counts in its session's share of the worker's budget until its last
/// holder (the transaction, a re-send copy, a mirror's copy) drops it, and then for the
/// worker's trim.
struct Held {
    bytes: usize,
    sink: Rc<Sink>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.sink.hold_frame(self.bytes, false);
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

    /// A large command's whole RESP frame, taken without a copy, and sent as `pieces`: ranges
    /// of it ([`Piece::Frame`]) and bytes of their own (its keys as their route rewrites
    /// them); no pieces: the frame as it is. Its memory counts for `sink`'s session in the
    /// worker's budget until the last copy of these commands goes. `None` if a range falls
    /// outside the frame (they were cut from the same bytes, so never).
    pub(super) fn frame(frame: Vec<u8>, pieces: Vec<Piece>, sink: &Rc<Sink>) -> Option<Commands> {
        let bytes = frame.capacity();
        let frame = bytes::Bytes::from(frame);
        let pieces = if pieces.is_empty() {
            vec![Piece::Shared(frame.clone())]
        } else {
            let mut shared = Vec::with_capacity(pieces.len());
            for p in pieces {
                shared.push(match p {
                    Piece::Frame(r) => {
                        frame.get(r.clone())?;
                        Piece::Shared(frame.slice(r))
                    }
                    own => own,
                });
            }
            shared
        };
        sink.hold_frame(bytes, true);
        let held = Held {
            bytes,
            sink: sink.clone(),
        };
        Some(Commands {
            pieces,
            tail: Vec::new(),
            held: vec![Rc::new(held)],
        })
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
