//! The frontend messages a client may send, checked whole before pgwire
//! decodes them: pgwire's decoders read a message's fields with `bytes`'
//! panicking getters and past the end of its body (a Parse that ends before
//! its parameter count panics the connection's task), so every message is
//! checked here first against the protocol's layout, and one that does not
//! fit is a protocol violation (SQLSTATE 08P01) that closes the
//! connection. A message longer than a client could mean is refused from
//! its header, before its body is buffered. Pure: no I/O.

use std::fmt;

/// PostgreSQL's own limit on a startup packet.
pub const MAX_STARTUP: usize = 10_000;

/// The longest message accepted once a client is logged in: a query or a
/// bound value of up to 64 MiB.
pub const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// The longest message of a client not yet logged in, and of the messages
/// that never carry data (Describe, Close, Execute, Sync, Flush, Terminate,
/// CopyDone, CopyFail, password messages), as pgwire bounds them.
pub const MAX_SMALL: usize = 10_000;

const CANCEL_CODE: i32 = 80_877_102;
const SSL_CODE: i32 = 80_877_103;
const GSS_CODE: i32 = 80_877_104;

/// A message that breaks the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where the client is in the protocol: what its next message looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// The startup packet (or a cancel request): a length, no type byte.
    #[default]
    Startup,
    /// Typed messages; the first password message (`p`) is a SASL
    /// initial response.
    FirstPassword,
    /// Typed messages.
    Typed,
    /// Nothing more: the client sent a cancel request.
    Done,
}

/// What the front of `buf` holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// Not yet a whole message: read more.
    Incomplete,
    /// A whole, well-formed message of this many bytes.
    Complete(usize),
}

/// Checks the message at the front of `buf`; `phase` is advanced past it
/// when it is complete. Before login (`logged_in` false) no message may be
/// longer than `MAX_SMALL`.
pub fn check(buf: &[u8], phase: &mut Phase, logged_in: bool) -> Result<Frame, Violation> {
    match phase {
        Phase::Done if buf.is_empty() => Ok(Frame::Incomplete),
        Phase::Done => Err(bad("data after a cancel request".into())),
        Phase::Startup => {
            let Some(len) = int32(buf, 0) else {
                return Ok(Frame::Incomplete);
            };
            let len = usize::try_from(len)
                .ok()
                .filter(|l| (8..=MAX_STARTUP).contains(l))
                .ok_or_else(|| bad(format!("invalid startup packet length {len}")))?;
            let Some(body) = buf.get(4..len) else {
                return Ok(Frame::Incomplete);
            };
            *phase = if startup(body)? {
                Phase::Done
            } else {
                Phase::FirstPassword
            };
            Ok(Frame::Complete(len))
        }
        Phase::FirstPassword | Phase::Typed => {
            let (Some(&kind), Some(len)) = (buf.first(), int32(buf, 1)) else {
                return Ok(Frame::Incomplete);
            };
            let len = usize::try_from(len)
                .ok()
                .filter(|l| *l >= 4)
                .ok_or_else(|| bad(format!("invalid message length {len}")))?;
            let small = !logged_in || b"DCESHXcfp".contains(&kind);
            let most = if small { MAX_SMALL } else { MAX_MESSAGE };
            if len > most {
                return Err(bad(format!(
                    "message of {len} bytes is longer than the {most} accepted"
                )));
            }
            let Some(body) = buf.get(5..1 + len) else {
                return Ok(Frame::Incomplete);
            };
            let first_password = *phase == Phase::FirstPassword && kind == b'p';
            typed(kind, body, first_password)?;
            if kind == b'p' {
                *phase = Phase::Typed;
            }
            Ok(Frame::Complete(1 + len))
        }
    }
}

fn bad(message: String) -> Violation {
    Violation(message)
}

fn int32(buf: &[u8], at: usize) -> Option<i32> {
    let bytes: [u8; 4] = buf.get(at..at + 4)?.try_into().ok()?;
    Some(i32::from_be_bytes(bytes))
}

/// The startup packet's body (after its length): a protocol version and
/// name/value pairs, or a cancel request (`true`): a process id and a
/// secret key of 4 bytes (protocol 3.0) up to 256 (3.2).
fn startup(body: &[u8]) -> Result<bool, Violation> {
    let mut r = Reader::new(body, "startup packet");
    match r.int32()? {
        CANCEL_CODE => {
            r.int32()?;
            let key = body.len().saturating_sub(8);
            if !(4..=256).contains(&key) {
                return Err(bad(format!("a cancel request's key of {key} bytes")));
            }
            return Ok(true);
        }
        SSL_CODE | GSS_CODE => return Err(bad("encryption requested twice".into())),
        version if version >> 16 == 3 => {
            // Pairs end with an empty name.
            while !r.cstring()?.is_empty() {
                r.cstring()?;
            }
        }
        version => {
            return Err(bad(format!(
                "unsupported frontend protocol {}.{}",
                version >> 16,
                version & 0xffff
            )));
        }
    }
    r.end().map(|()| false)
}

/// A typed message's body, by its type byte.
fn typed(kind: u8, body: &[u8], first_password: bool) -> Result<(), Violation> {
    let what = match kind {
        b'Q' => "Query",
        b'P' => "Parse",
        b'B' => "Bind",
        b'D' => "Describe",
        b'E' => "Execute",
        b'C' => "Close",
        b'S' => "Sync",
        b'H' => "Flush",
        b'X' => "Terminate",
        b'd' => "CopyData",
        b'c' => "CopyDone",
        b'f' => "CopyFail",
        b'p' => "password message",
        b'F' => return Err(bad("FunctionCall is not supported".into())),
        other => {
            return Err(bad(format!(
                "invalid frontend message type {:?}",
                char::from(other)
            )));
        }
    };
    let mut r = Reader::new(body, what);
    match kind {
        b'Q' | b'f' => {
            r.cstring()?;
        }
        b'P' => {
            r.cstring()?;
            r.cstring()?;
            let n = r.count()?;
            r.skip(n * 4)?;
        }
        b'B' => {
            r.cstring()?;
            r.cstring()?;
            let n = r.count()?;
            r.skip(n * 2)?;
            r.values()?;
            let n = r.count()?;
            r.skip(n * 2)?;
        }
        b'D' | b'C' => {
            match r.byte()? {
                b'S' | b'P' => {}
                other => {
                    return Err(bad(format!(
                        "{what} names {:?}, not S or P",
                        char::from(other)
                    )));
                }
            }
            r.cstring()?;
        }
        b'E' => {
            r.cstring()?;
            r.int32()?;
        }
        b'S' | b'H' | b'X' | b'c' => {}
        // SASL's initial response: a mechanism, then the length of what
        // follows (-1 for none). Later password messages are opaque.
        b'p' if first_password => {
            r.cstring()?;
            let n = r.int32()?;
            if n >= 0 {
                r.skip(n as usize)?;
            } else if n != -1 {
                return Err(bad(format!("{what}: invalid length {n}")));
            }
        }
        _ => return Ok(()),
    }
    r.end()
}

/// Reads a body's fields, failing where one would run past its end.
struct Reader<'a> {
    body: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(body: &'a [u8], what: &'static str) -> Self {
        Self { body, at: 0, what }
    }

    fn short(&self) -> Violation {
        bad(format!("{} ends before its fields do", self.what))
    }

    fn skip(&mut self, n: usize) -> Result<&'a [u8], Violation> {
        let end = self.at.checked_add(n).ok_or_else(|| self.short())?;
        let bytes = self.body.get(self.at..end).ok_or_else(|| self.short())?;
        self.at = end;
        Ok(bytes)
    }

    fn byte(&mut self) -> Result<u8, Violation> {
        Ok(self.skip(1)?[0])
    }

    fn int32(&mut self) -> Result<i32, Violation> {
        let b = self.skip(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A count of the elements that follow: unsigned, as PostgreSQL
    /// reads it (a statement may have up to 65,535 parameters).
    fn count(&mut self) -> Result<usize, Violation> {
        let b = self.skip(2)?;
        Ok(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    /// A NUL-terminated string.
    fn cstring(&mut self) -> Result<&'a [u8], Violation> {
        let rest = self.body.get(self.at..).unwrap_or_default();
        let n = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| bad(format!("{}: a string without its terminator", self.what)))?;
        self.at += n + 1;
        Ok(&rest[..n])
    }

    /// A count, then that many values, each a length (-1 for NULL) and bytes.
    fn values(&mut self) -> Result<(), Violation> {
        for _ in 0..self.count()? {
            match self.int32()? {
                -1 => {}
                n if n >= 0 => {
                    self.skip(n as usize)?;
                }
                n => return Err(bad(format!("{}: invalid value length {n}", self.what))),
            }
        }
        Ok(())
    }

    fn end(&self) -> Result<(), Violation> {
        if self.at == self.body.len() {
            Ok(())
        } else {
            Err(bad(format!(
                "{} has {} bytes after its fields",
                self.what,
                self.body.len() - self.at
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn typed_check(m: &[u8]) -> Result<Frame, Violation> {
        check(m, &mut Phase::Typed, true)
    }

    #[test]
    fn whole_messages_pass_and_broken_ones_do_not() {
        // A Parse of "SELECT 1" with one parameter type.
        let parse = message(b'P', b"s1\0SELECT 1\0\x00\x01\x00\x00\x00\x17");
        assert_eq!(typed_check(&parse), Ok(Frame::Complete(parse.len())));
        // The bug pgwire panics on: the body ends before the type count.
        let short = message(b'P', b"s1\0SELECT 1\0");
        assert!(typed_check(&short).unwrap_err().0.contains("ends before"));
        // Half a message is not yet a verdict.
        assert_eq!(typed_check(&parse[..7]), Ok(Frame::Incomplete));
        // A Bind with a NULL and a 2-byte value, text results.
        let bind = message(
            b'B',
            b"\0s1\0\x00\x00\x00\x02\xff\xff\xff\xff\x00\x00\x00\x0242\x00\x00",
        );
        assert_eq!(typed_check(&bind), Ok(Frame::Complete(bind.len())));
        let lying = message(b'B', b"\0s1\0\x00\x00\x00\x01\x00\x00\x00\x09ab\x00\x00");
        assert!(typed_check(&lying).is_err());
        assert!(typed_check(&message(b'Q', b"SELECT 1")).is_err());
        assert!(typed_check(&message(b'Q', b"SELECT 1\0extra")).is_err());
        assert!(typed_check(&message(b'D', b"Xname\0")).is_err());
        assert!(typed_check(&message(b'Z', b"")).is_err());
        assert!(typed_check(&[b'Q', 0, 0, 0, 2]).is_err());
        // Too long is refused from the header alone.
        let mut huge = vec![b'Q'];
        huge.extend_from_slice(&(MAX_MESSAGE as i32 + 5).to_be_bytes());
        assert!(typed_check(&huge).unwrap_err().0.contains("longer than"));
    }

    #[test]
    fn the_startup_packet_and_the_first_password_message() {
        let mut body = 196_608i32.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0me\0\0");
        let mut packet = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        packet.extend_from_slice(&body);
        let mut phase = Phase::Startup;
        assert_eq!(
            check(&packet, &mut phase, false),
            Ok(Frame::Complete(packet.len()))
        );
        assert_eq!(phase, Phase::FirstPassword);
        // A SASL initial response whose length runs past the body.
        let sasl = message(b'p', b"SCRAM-SHA-256\0\x00\x00\x00\x10n,,n=");
        assert!(check(&sasl, &mut phase, false).is_err());
        let sasl = message(b'p', b"SCRAM-SHA-256\0\x00\x00\x00\x04n,,n");
        assert_eq!(
            check(&sasl, &mut phase, false),
            Ok(Frame::Complete(sasl.len()))
        );
        assert_eq!(phase, Phase::Typed);
        // An unterminated parameter list; an absurd length.
        let mut phase = Phase::Startup;
        let cut = [&packet[..4], &196_608i32.to_be_bytes(), b"user\0me"].concat();
        let cut = [&((cut.len()) as i32).to_be_bytes(), &cut[4..]].concat();
        assert!(check(&cut, &mut phase, false).is_err());
        assert!(check(&[0x7f, 0, 0, 0], &mut Phase::Startup, false).is_err());
        // A cancel request with a 3.2 key of 32 bytes; then nothing more.
        let mut cancel = 44i32.to_be_bytes().to_vec();
        cancel.extend_from_slice(&CANCEL_CODE.to_be_bytes());
        cancel.extend_from_slice(&[7; 36]);
        let mut phase = Phase::Startup;
        assert_eq!(check(&cancel, &mut phase, false), Ok(Frame::Complete(44)));
        assert!(check(b"Q", &mut phase, false).is_err());
        // Before login, no message over 10,000 bytes.
        let big = message(b'Q', &[b'x'; 20_000]);
        assert!(check(&big[..5], &mut Phase::FirstPassword, false).is_err());
    }

    #[test]
    fn counts_are_unsigned() {
        // A Bind of 40,000 NULL parameters (0x9c40, negative as i16).
        let mut body = b"\0\0\x00\x00\x9c\x40".to_vec();
        for _ in 0..40_000 {
            body.extend_from_slice(&(-1i32).to_be_bytes());
        }
        body.extend_from_slice(b"\x00\x00");
        let bind = message(b'B', &body);
        assert_eq!(typed_check(&bind), Ok(Frame::Complete(bind.len())));
    }
}
