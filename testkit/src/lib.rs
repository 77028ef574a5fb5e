//! Test support for Sluice, kept out of the release library: the golden packet fixtures
//! ([`golden`]) that the appliance's tests, its `lb` bench and the XDP flow-cache parity
//! test replay, and the one builder of configurations for unit tests ([`unit`]). `lb` and the
//! appliance take this crate as a dev-dependency. `lb`'s own unit tests use only the parts
//! made of `config`'s types and plain data: `lb`'s types from here belong to a second build
//! of `lb`.

#![forbid(unsafe_code)]

pub mod golden;
pub mod unit;
