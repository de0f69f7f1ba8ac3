//! The HTTP side of `pagescope serve`: `GET /metrics` returns the last
//! collection's text. `tiny_http` parses the requests and answers a
//! malformed one with 400 itself.

use std::sync::{Arc, Mutex};

/// What the last collection rendered (`None` before the first).
pub type Latest = Arc<Mutex<Option<Arc<String>>>>;

/// The OpenMetrics text format's content type.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Answers requests until the server is unblocked.
pub fn serve(server: &tiny_http::Server, latest: &Latest) {
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("");
        let method = request.method().clone();
        let response = match (path, &method) {
            ("/metrics", tiny_http::Method::Get | tiny_http::Method::Head) => {
                let text = latest.lock().unwrap_or_else(|e| e.into_inner()).clone();
                match text {
                    Some(t) => respond(200, CONTENT_TYPE, t.as_bytes().to_vec()),
                    None => respond(503, "text/plain", b"no collection yet\n".to_vec()),
                }
            }
            ("/metrics", _) => respond(405, "text/plain", b"only GET\n".to_vec())
                .with_header(header("Allow", "GET, HEAD")),
            ("/", tiny_http::Method::Get | tiny_http::Method::Head) => respond(
                200,
                "text/html; charset=utf-8",
                b"<html><body><a href=\"/metrics\">/metrics</a></body></html>\n".to_vec(),
            ),
            _ => respond(404, "text/plain", b"not found: try /metrics\n".to_vec()),
        };
        // A client that went away is its own business.
        let _ = request.respond(response);
    }
}

fn respond(
    code: u16,
    content_type: &str,
    body: Vec<u8>,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    tiny_http::Response::from_data(body)
        .with_status_code(code)
        .with_header(header("Content-Type", content_type))
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes())
        .expect("a header made of ASCII is valid")
}
