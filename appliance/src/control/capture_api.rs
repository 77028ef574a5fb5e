//! `POST /v1/capture` over [`super::capture`]: the request's frames as pcapng, or the error
//! as the API's JSON document. Apart from the capture itself, which knows nothing of the
//! API's state.

use std::sync::Arc;

use api::CaptureRequest;

use super::capture::CaptureError;
use super::model::Shared;

/// `POST /v1/capture`: the request's frames as pcapng, or the error as the API's JSON.
pub(super) async fn route(
    axum::extract::State(s): axum::extract::State<Arc<Shared>>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let error = |status: StatusCode, error: String, field: Option<&str>| {
        let doc = api::ApiError {
            error,
            field: field.map(str::to_string),
            errors: Vec::new(),
        };
        (status, axum::Json(doc)).into_response()
    };
    let req: CaptureRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("body is not a capture request: {e}"),
                Some("body"),
            );
        }
    };
    let config = s.view.load().config.clone();
    let shared = Arc::clone(&s);
    let done =
        tokio::task::spawn_blocking(move || shared.capture.run(config.as_deref(), &req)).await;
    match done {
        Ok(Ok(c)) => (
            [
                (header::CONTENT_TYPE, "application/x-pcapng".to_string()),
                (
                    header::HeaderName::from_static(api::capture_headers::FRAMES),
                    c.frames.to_string(),
                ),
                (
                    header::HeaderName::from_static(api::capture_headers::LOST),
                    c.lost.to_string(),
                ),
            ],
            c.pcapng,
        )
            .into_response(),
        Ok(Err(e)) => {
            let (status, field) = match &e {
                CaptureError::Invalid { field, .. } => (StatusCode::BAD_REQUEST, Some(*field)),
                CaptureError::UnknownVip(_) => (StatusCode::NOT_FOUND, Some("vip")),
                CaptureError::Busy => (StatusCode::CONFLICT, None),
                CaptureError::NoDatapath => (StatusCode::SERVICE_UNAVAILABLE, None),
                CaptureError::Datapath(_) | CaptureError::Write(_) => {
                    (StatusCode::INTERNAL_SERVER_ERROR, None)
                }
            };
            error(status, e.to_string(), field)
        }
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("capture task failed: {e}"),
            None,
        ),
    }
}
