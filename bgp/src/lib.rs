//! Sluice's embedded BGP speaker: announces VIPs as host routes to upstream routers.
#![forbid(unsafe_code)]
