//! Test support for Sluice, kept out of the release library: the golden packet fixtures
//! ([`golden`]) that the appliance's tests, its `lb` bench and the XDP flow-cache parity
//! test replay. The appliance takes this crate as a dev-dependency; its own unit tests use
//! only the plain-data parts (the configuration text, the frame builder, constants), since
//! types from here belong to a separate build of the appliance library.

#![forbid(unsafe_code)]

pub mod golden;
