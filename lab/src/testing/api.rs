//! The appliance's local API from a test's thread: the API crate's client with a runtime of
//! its own, so a test calls it as a function and gets the document back; and async code run
//! inside a namespace.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use api::{Client, Endpoint};

/// An API client over a unix socket that blocks on each call.
pub struct Api {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Api {
    /// A client of the API listening on `socket`, waiting as long as a call takes.
    pub fn unix(socket: &Path) -> Api {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
        Api {
            rt,
            client: Client::new(Endpoint::Unix(socket.to_path_buf())),
        }
    }

    /// The same, giving up on a call after `timeout`.
    pub fn with_timeout(self, timeout: Duration) -> Api {
        Api {
            rt: self.rt,
            client: self.client.with_timeout(timeout),
        }
    }

    /// The client (for calls [`Api::call`] does not fit).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs one call of the client to its end: `api.call(|c| c.status())`.
    pub fn call<'a, F, Fut>(&'a self, f: F) -> Fut::Output
    where
        F: FnOnce(&'a Client) -> Fut,
        Fut: Future + 'a,
    {
        self.rt.block_on(f(&self.client))
    }

    /// Runs any future on the client's runtime.
    pub fn block_on<Fut: Future>(&self, fut: Fut) -> Fut::Output {
        self.rt.block_on(fut)
    }
}

/// Runs the future `make` returns to its end on a new thread that has entered `ns` (every
/// socket it opens lives there), on a single-threaded runtime of that thread's own; join the
/// handle for its output.
pub fn async_in<F, Fut>(ns: &crate::netns::Netns, make: F) -> std::thread::JoinHandle<Fut::Output>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future,
    Fut::Output: Send + 'static,
{
    let name = ns.name.clone();
    std::thread::spawn(move || {
        crate::netns::enter(&name);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
        rt.block_on(make())
    })
}
