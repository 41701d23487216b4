//! Hostile clients against `tablesql serve`: thousands of malformed startup
//! packets, frames and message bodies (truncated, oversized, wrong counts,
//! lengths that lie, unknown types, invalid UTF-8), some after a proper
//! startup. After each batch the server must still answer `SELECT 1`; at the
//! end its log must hold no panic and its memory must not have grown with
//! the cases. A message that breaks the protocol is answered with 08P01.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::server::serve;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const CASES: usize = 5_000;
const BATCH: usize = 250;

/// A deterministic generator (xorshift64*), so a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn framed(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn startup() -> Vec<u8> {
    let mut body = 196_608i32.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0tablesql\0database\0tablesql\0\0");
    let mut m = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    m.extend_from_slice(&body);
    m
}

/// One hostile case: the bytes to send, and whether a proper startup
/// comes first.
fn case(rng: &mut Rng) -> (bool, Vec<u8>) {
    let noise = rng.below(64);
    let junk = rng.bytes(noise);
    match rng.below(12) {
        // Startup packets: lengths that lie, bodies cut short, random bytes.
        0 => (
            false,
            [&(rng.next() as i32).to_be_bytes()[..], &junk].concat(),
        ),
        1 => {
            let s = startup();
            let cut = rng.below(s.len());
            (false, s[..cut.max(4)].to_vec())
        }
        2 => {
            let mut body = 196_608i32.to_be_bytes().to_vec();
            body.extend_from_slice(b"user\0\xff\xfe\0");
            body.extend_from_slice(&junk);
            (
                false,
                [&((body.len() + 4) as i32).to_be_bytes()[..], &body].concat(),
            )
        }
        3 => (false, junk),
        // After startup: the Parse whose body ends before its type count.
        4 => (true, framed(b'P', b"s\0SELECT 1\0")),
        // Bind with counts that claim more than there is.
        5 => {
            let mut b = b"\0\0".to_vec();
            b.extend_from_slice(&(rng.below(40_000) as u16).to_be_bytes());
            b.extend_from_slice(&junk);
            (true, framed(b'B', &b))
        }
        // A length under 4, or a header announcing a gigabyte.
        6 => (true, vec![b'Q', 0, 0, 0, rng.below(4) as u8]),
        7 => (
            true,
            [&[b'Q'][..], &0x3fff_fff0i32.to_be_bytes(), &junk].concat(),
        ),
        // Unknown types, random bodies of known ones.
        8 => {
            let kinds = b"PBDECSHXdcfFpQZ\x00\xff";
            let kind = kinds[rng.below(kinds.len())];
            (true, framed(kind, &junk))
        }
        // Invalid UTF-8 in a well-framed query: an error, not a fault.
        9 => (true, framed(b'Q', b"SELECT '\xff\xfe'\0")),
        // A well-framed message cut before its end, then the client leaves.
        10 => {
            let m = framed(b'Q', b"SELECT 1\0");
            (true, m[..1 + rng.below(m.len() - 1)].to_vec())
        }
        _ => {
            let mut stream = Vec::new();
            for _ in 0..1 + rng.below(4) {
                let n = rng.below(32);
                let body = rng.bytes(n);
                stream.extend(framed(b"PBDE"[rng.below(4)], &body));
            }
            (true, stream)
        }
    }
}

/// Runs one case; returns what the server sent back (bounded in time and size).
async fn run(addr: std::net::SocketAddr, proper_startup: bool, bytes: &[u8]) -> Vec<u8> {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return Vec::new();
    };
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    if proper_startup {
        if s.write_all(&startup()).await.is_err() {
            return got;
        }
        // Read up to ReadyForQuery ('Z', length 5, 'I').
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !got.windows(6).any(|w| w == [b'Z', 0, 0, 0, 5, b'I']) {
            match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => return got,
            }
        }
        got.clear();
    }
    let _ = s.write_all(bytes).await;
    let _ = s.shutdown().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while got.len() < 1 << 16 {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_cannot_knock_the_server_over() -> TestResult {
    let server = serve(1000, &[])?;
    let addr = server.addr;
    let client = tokio::time::timeout(Duration::from_secs(30), server.connect()).await??;
    client.simple_query("SELECT 1").await?;
    // The bug this guards against: pgwire's Parse decoder panicked here.
    let answer = run(addr, true, &framed(b'P', b"s\0SELECT 1\0")).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(
        text.contains("08P01") && text.contains("Parse ends before its fields do"),
        "{text:?}"
    );
    let mut rng = Rng(0x5eed_cafe_f00d_1234);
    let mut baseline = 0;
    // Cases the server answered with 08P01: proof that they reached it.
    let mut refused = 0;
    for batch in 0..CASES / BATCH {
        let cases: Vec<(bool, Vec<u8>)> = (0..BATCH).map(|_| case(&mut rng)).collect();
        let runs = cases
            .iter()
            .map(|(proper, bytes)| run(addr, *proper, bytes));
        for answer in futures::future::join_all(runs).await {
            if answer.windows(5).any(|w| w == b"08P01") {
                refused += 1;
            }
        }
        // Still serving, on a connection opened now and on the old one.
        let fresh = tokio::time::timeout(Duration::from_secs(30), server.connect()).await??;
        fresh.simple_query("SELECT 1").await?;
        client.simple_query("SELECT 1").await?;
        if batch == 1 {
            baseline = server.rss_kib()?;
        }
    }
    let grown = server.rss_kib()?.saturating_sub(baseline);
    let log = server.log();
    assert!(
        !log.contains("panicked") && !log.contains("internal error"),
        "the server's log: {}",
        log.lines().take(20).collect::<Vec<_>>().join("\n")
    );
    assert!(
        refused >= CASES / 4,
        "only {refused} of {CASES} cases drew 08P01"
    );
    // Flat: 4,500 cases after the baseline did not keep what they sent.
    assert!(
        grown < 32 * 1024,
        "the server grew by {grown} KiB over the cases"
    );
    Ok(())
}

/// After a FATAL error nothing the client sends runs: here a plaintext
/// client refused by a server that requires TLS sends a DELETE anyway,
/// which must not reach the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_runs_after_a_fatal_error() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()?;
    assert!(made.success());
    let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());
    let server = serve(1000, &["--tls-cert", &cert, "--tls-key", &key])?;
    let delete = b"DELETE FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib = 1\0";
    let bytes = [startup(), framed(b'Q', delete)].concat();
    let answer = {
        let mut s = TcpStream::connect(server.addr).await?;
        s.write_all(&bytes).await?;
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
        got
    };
    let text = String::from_utf8_lossy(&answer);
    assert!(text.contains("28000"), "{text:?}");
    assert!(!text.contains("DELETE"), "{text:?}");
    // The row is still there, seen over TLS.
    let out = server.psql(
        "sslmode=require",
        &["-At", "-c", "SELECT count(*) FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib = 1"],
    )?;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "1",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
