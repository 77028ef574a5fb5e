//! Sluice's health prober: checks backends with rise/fall hysteresis.
#![forbid(unsafe_code)]
