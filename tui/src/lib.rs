//! Sluice's terminal console, talking to the appliance through its local API.
#![forbid(unsafe_code)]
