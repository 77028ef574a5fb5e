//! What handling one input produces: effects in order, and the changes whose commit
//! finished, which `handle` carries on with before it returns.

use std::collections::VecDeque;

use crate::control::change::UpdateError;
use crate::control::effect::{Counter, Effect};
use crate::control::events::Kind;
use crate::control::pending::{Done, Then};

/// Effects so far, and finished commits waiting for their change to go on.
#[derive(Debug, Default)]
pub struct Out {
    pub effects: Vec<Effect>,
    pub done: VecDeque<Done>,
}

impl Out {
    pub fn push(&mut self, e: Effect) {
        self.effects.push(e);
    }

    pub fn event(&mut self, kind: Kind, message: impl Into<String>) {
        self.push(Effect::Event(kind, message.into()));
    }

    pub fn count(&mut self, c: Counter) {
        self.push(Effect::Count(c));
    }

    /// A fresh view for readers (no new datapath counters).
    pub fn view(&mut self) {
        self.push(Effect::View { datapath: None });
    }

    /// The commit of `then`'s change finished with `result`.
    pub fn done(&mut self, then: Then, why: String, result: Result<u64, UpdateError>) {
        self.done.push_back(Done { then, why, result });
    }
}
