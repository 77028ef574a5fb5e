//! `[flood]`: when the XDP program's flood mode switches on and how much each source may
//! send while it is on.

use crate::error::ConfigErrors;
use crate::model::Flood;
use crate::reader::Table;

/// The highest rate any key takes: above it the mode could never bite (a 2-core machine
/// takes a few million frames a second at most), and the XDP program's token arithmetic
/// stays within 64 bits.
const MAX_RATE: i64 = 100_000_000;

pub(super) fn flood(mut t: Table<'_>, errs: &mut ConfigErrors) -> Flood {
    let d = Flood::default();
    let enabled = t.bool("enabled", errs).unwrap_or(d.enabled);
    let int = |t: &mut Table<'_>, key: &str, default: u32, errs: &mut ConfigErrors| {
        t.int(key, 1..=MAX_RATE, errs).map_or(default, |n| n as u32)
    };
    let threshold = int(&mut t, "threshold", d.threshold, errs);
    let per_source_rate = int(&mut t, "per_source_rate", d.per_source_rate, errs);
    let per_source_burst = int(&mut t, "per_source_burst", d.per_source_burst, errs);
    t.finish(errs);
    Flood {
        enabled,
        threshold,
        per_source_rate,
        per_source_burst,
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, Flood};

    const BASE: &str = "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\n\
        [[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\nprotocol = \"tcp\"\n\
        [[vip.backend]]\naddress = \"10.0.0.21\"\n";

    #[test]
    fn absent_means_the_defaults_and_every_key_is_read() {
        let c = Config::from_toml_str(BASE).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.flood, Flood::default());
        let text = format!(
            "{BASE}\n[flood]\nenabled = false\nthreshold = 5000\nper_source_rate = 50\n\
             per_source_burst = 60\n"
        );
        let c = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.flood,
            Flood {
                enabled: false,
                threshold: 5000,
                per_source_rate: 50,
                per_source_burst: 60,
            }
        );
    }

    #[test]
    fn out_of_range_and_unknown_keys_name_their_path() {
        let text = format!("{BASE}\n[flood]\nthreshold = 0\nper_source_rate = -1\nburst = 3\n");
        let e = Config::from_toml_str(&text)
            .expect_err("invalid [flood]")
            .to_string();
        assert!(e.contains("flood.threshold: 0 is out of range"), "{e}");
        assert!(
            e.contains("flood.per_source_rate: -1 is out of range"),
            "{e}"
        );
        assert!(e.contains("flood.burst"), "{e}");
    }
}
