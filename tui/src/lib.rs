//! `sluice console`: the appliance's face on its own screen, htop/k9s style.
//!
//! It reads and steers the running appliance through the local API only (never its
//! tables), so quitting or crashing it never disturbs forwarding, and it survives the
//! appliance restarting: it keeps polling and says so on screen. The API's documents, client
//! and number formatting come from the `api` crate; this crate is the console only.
//!
//! The shape is model/update/view: [`app`] holds the [`App`](app::App) model, the key map
//! and `update`, which returns API calls as data; [`view`] draws an `App`; `runtime` owns
//! the terminal, the timer and the API calls. [`rates`] is the arithmetic.
#![forbid(unsafe_code)]

pub mod app;
pub mod rates;
mod runtime;
pub mod view;

use std::time::Duration;

use api::Endpoint;

/// How `sluice console` runs.
#[derive(Debug, Clone)]
pub struct ConsoleOptions {
    /// The appliance's API.
    pub endpoint: Endpoint,
    /// No colours (`--no-color` or `NO_COLOR`).
    pub no_color: bool,
    /// How often to poll the API.
    pub refresh: Duration,
}

/// Why the console stopped.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

/// Runs the console until the operator quits (or the terminal goes away). Builds its own
/// tokio runtime, so call it from outside one. The terminal is restored on every way out.
pub fn run(opts: ConsoleOptions) -> Result<(), ConsoleError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(runtime::run(opts))
}
