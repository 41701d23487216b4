//! Passwords (SCRAM) and TLS.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_passwords_and_trust_policy() -> TestResult {
    let dir = tempfile::tempdir()?;
    let users = dir.path().join("users");
    std::fs::write(&users, "# name:password\nalice:correct horse\n")?;
    let users = users.to_string_lossy().into_owned();
    let server = serve(1000, &["--users-file", &users])?;

    let ok = connect(&format!(
        "{} password='correct horse'",
        server.conninfo("alice")
    ))
    .await?;
    assert_eq!(
        ok.query_one("SELECT 1::INT", &[]).await?.get::<_, i32>(0),
        1
    );
    for (user, password) in [
        ("alice", "wrong-password-xyz"),
        ("mallory", "correct horse"),
    ] {
        let e = connect(&format!("{} password='{password}'", server.conninfo(user)))
            .await
            .err()
            .ok_or("logged in with a bad password")?;
        assert_eq!(code(&e), "28P01", "{user}: {e:?}");
    }
    let e = connect(&server.conninfo("alice"))
        .await
        .err()
        .ok_or("no password")?;
    assert!(format!("{e:?}").contains("password"), "{e:?}");
    let log = server.log();
    assert!(
        !log.contains("correct horse") && !log.contains("wrong-password-xyz"),
        "{log}"
    );

    // trust on an address other machines reach is refused at start.
    let out = tablesql()
        .arg("--store")
        .arg(dir.path().join("s"))
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("only allowed on a loopback address"),
        "{}",
        text(&out)
    );
    Ok(())
}

#[test]
fn tls_on_and_off() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()?;
    assert!(made.success());
    let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());

    let tls = serve(1000, &["--tls-cert", &cert, "--tls-key", &key])?;
    let on = tls.psql("sslmode=require", &["-c", "\\conninfo"])?;
    let shown = text(&on);
    assert!(
        shown.contains("SSL connection (protocol: TLSv1.3"),
        "{shown}"
    );
    let plain = tls.psql("sslmode=disable", &["-c", "SELECT 1"])?;
    assert!(!plain.status.success());
    assert!(
        text(&plain).contains("accepts TLS connections only"),
        "{}",
        text(&plain)
    );

    let off = serve(1000, &[])?;
    let out = off.psql("sslmode=disable", &["-A", "-t", "-c", "SELECT 1"])?;
    assert!(out.status.success(), "{}", text(&out));
    let out = off.psql("sslmode=require", &["-c", "SELECT 1"])?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("does not support SSL"),
        "{}",
        text(&out)
    );

    // A key that does not load stops the server: no plaintext fallback.
    let bad = serve(1000, &["--tls-cert", &cert, "--tls-key", &cert]);
    let e = bad.err().ok_or("started with a bad key")?;
    assert!(e.to_string().contains("TLS"), "{e}");
    Ok(())
}

/// `--max-connections`: past the cap a client is refused at startup with
/// PostgreSQL's 53300 and its words (tokio-postgres and the real psql both
/// hear them), the connections already open keep answering, and the place
/// of a connection that closes is taken by the next. Connections past the
/// cap that send nothing cost the server little: as many as the cap wait
/// (each for at most 5 s) for their startup message, and more are closed
/// unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_get_53300_and_the_others_keep_working() -> TestResult {
    let server = serve(1000, &["--max-connections", "3"])?;
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(server.connect().await?);
    }
    let refused = server
        .connect()
        .await
        .err()
        .ok_or("a fourth connection got in")?;
    assert_eq!(code(&refused), "53300", "{refused:?}");
    let out = server.psql("", &["-c", "SELECT 1"])?;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("sorry, too many clients already"),
        "{}",
        text(&out)
    );
    for client in &open {
        let one: i32 = client.query_one("SELECT 1::INT", &[]).await?.get(0);
        assert_eq!(one, 1);
    }
    // The server hears of the close a moment after the client is dropped.
    drop(open.pop());
    let mut deadline =
        crate::wait::Deadline::new(Duration::from_secs(30), "a closed connection's place back");
    let again = loop {
        match server.connect().await {
            Ok(client) => break client,
            Err(e) if code(&e) == "53300" => deadline.again_async(e).await?,
            Err(e) => return Err(e.into()),
        }
    };
    let one: i32 = again.query_one("SELECT 1::INT", &[]).await?.get(0);
    assert_eq!(one, 1);
    let still = server
        .connect()
        .await
        .err()
        .ok_or("the cap no longer holds")?;
    assert_eq!(code(&still), "53300", "{still:?}");
    // Silent connections past the cap: three wait for a startup message,
    // the fourth is closed at once, and the three are told 53300 at the
    // bound, then closed.
    let closed_within = |mut socket: tokio::net::TcpStream, bound: Duration| async move {
        use tokio::io::AsyncReadExt;
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(bound, socket.read(&mut byte)).await,
            Ok(Ok(0) | Err(_))
        )
    };
    // A refusal's place is given back when its task ends, a moment after
    // its client has read the 53300: the last ones end first.
    let mut deadline = crate::wait::Deadline::new(Duration::from_secs(30), "no refusal pending");
    loop {
        let refusing = server.metric("tablesql_connections_refusing")?;
        if refusing == 0.0 {
            break;
        }
        deadline.again_async(format!("{refusing} refusing")).await?;
    }
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(tokio::net::TcpStream::connect(server.addr).await?);
    }
    let one_more = tokio::net::TcpStream::connect(server.addr).await?;
    assert!(
        closed_within(one_more, Duration::from_secs(2)).await,
        "a connection past the refusals' bound was kept"
    );
    for mut socket in silent {
        use tokio::io::AsyncReadExt;
        let mut said = Vec::new();
        tokio::time::timeout(Duration::from_secs(15), socket.read_to_end(&mut said))
            .await
            .map_err(|_| "a silent connection past the cap was kept past its bound")??;
        assert_eq!(said.first(), Some(&b'E'), "{said:?}");
        assert!(String::from_utf8_lossy(&said).contains("53300"), "{said:?}");
    }
    let one: i32 = again.query_one("SELECT 1::INT", &[]).await?.get(0);
    assert_eq!(one, 1);
    assert!(!server.log().contains("panicked"), "{}", server.log());
    Ok(())
}
