//! `GET /metrics` over HTTP/1.1 (hyper's server, already built for the
//! Azure client's): the server's [`Metrics`] in Prometheus' text format.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::metrics::Metrics;

/// The exposition format's content type.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Answers scrapes on `listener` until the task is dropped.
pub async fn serve_metrics(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = answer(&metrics, &req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                // A scraper sends its request at once; a client that
                // does not is not kept.
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(tcp), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "metrics: connection failed");
            }
        });
    }
}

fn answer(metrics: &Metrics, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r
    };
    if req.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "not found: try /metrics\n".into());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
    }
    match metrics.encode() {
        Ok(text) => {
            let mut r = reply(StatusCode::OK, text);
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(TEXT_FORMAT),
            );
            r
        }
        Err(_) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding failed\n".into(),
        ),
    }
}
