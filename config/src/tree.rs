//! The parsed file as the tree of values the validators walk (`config::Value`). With
//! `SLUICE_` overrides in the environment the `config` crate merges them into the file
//! ([`through_config`], after `toml` has checked the syntax); without, the TOML parser's
//! own document becomes that tree ([`direct`]) in one pass, instead of the file being
//! parsed twice, deserialized into `toml`'s values, merged key by key and copied twice
//! more by the `config` crate, which cost most of a large file's check.
//!
//! Both give the same tree (the tests compare them): TOML strings, integers, booleans,
//! tables and arrays become the same values in the same order. What the two might read
//! differently takes the `config` crate's way, with its exact errors: a syntax error, an
//! integer beyond 64 bits, a float or a date anywhere (no key takes one), or a top-level
//! key the `config` crate would read as a path (`"a.b"`).

use config::{Map, Value, ValueKind};
use toml::de::{DeTable, DeValue};

/// Why the `config` crate's way failed.
#[derive(Debug)]
pub enum Error {
    /// Its message (an override it could not merge, for one).
    Config(String),
    /// The merged tree is not a table.
    NotATable,
}

/// The tree of `text` read by the TOML parser alone, or `None` when [`through_config`]
/// might read it differently.
pub fn direct(text: &str) -> Option<Map<String, Value>> {
    let doc = DeTable::parse(text).ok()?.into_inner();
    // The `config` crate reads each top-level key as a path expression; a plain identifier
    // is itself.
    let ident = |k: &str| {
        !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    if !doc.keys().all(|k| ident(k.get_ref())) {
        return None;
    }
    table(doc)
}

fn table(t: DeTable<'_>) -> Option<Map<String, Value>> {
    let mut out = Map::with_capacity(t.len());
    for (k, v) in t {
        out.insert(k.into_inner().into_owned(), value(v.into_inner())?);
    }
    Some(out)
}

fn value(v: DeValue<'_>) -> Option<Value> {
    let kind = match v {
        DeValue::String(s) => ValueKind::String(s.into_owned()),
        DeValue::Integer(n) => ValueKind::I64(i64::from_str_radix(n.as_str(), n.radix()).ok()?),
        DeValue::Boolean(b) => ValueKind::Boolean(b),
        DeValue::Array(items) => ValueKind::Array(
            items
                .into_iter()
                .map(|v| value(v.into_inner()))
                .collect::<Option<_>>()?,
        ),
        DeValue::Table(t) => ValueKind::Table(table(t)?),
        DeValue::Float(_) | DeValue::Datetime(_) => return None,
    };
    Some(Value::new(None, kind))
}

/// The tree of `text` with `overrides` (`SLUICE_...` variables) merged in by the `config`
/// crate.
pub fn through_config(
    text: &str,
    overrides: Map<String, String>,
) -> Result<Map<String, Value>, Error> {
    let built = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .add_source(
            config::Environment::with_prefix(crate::ENV_PREFIX)
                .prefix_separator("_")
                .separator("__")
                .try_parsing(true)
                .source(Some(overrides)),
        )
        .build()
        .map_err(|e| Error::Config(e.to_string()))?;
    let root: Value = built
        .try_deserialize()
        .map_err(|e| Error::Config(e.to_string()))?;
    match root.kind {
        ValueKind::Table(map) => Ok(map),
        _ => Err(Error::NotATable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parser_s_document_is_the_tree_the_config_crate_builds() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/");
        let mut texts: Vec<String> = [
            "sluice.toml",
            "invalid/many-errors.toml",
            "invalid/unknown-key.toml",
        ]
        .iter()
        .map(|f| std::fs::read_to_string(format!("{root}{f}")).expect("example"))
        .collect();
        texts.push(
            "[appliance]\nname = \"x\"\nb = true\nh = 0x7f\nneg = -12\nm = 1_000\ne = []\n\
             s = 'lit'\nml = \"\"\"\na\\tb\"\"\"\n\
             \"quoted key\" = { \"a.b\" = [1, [\"x\", { y = 2 }]] }\n\
             [appliance.sub]\nz = 1\n[[vip]]\nname = \"\"\n[[vip]]\n[empty]\n"
                .into(),
        );
        for text in &texts {
            let fast = direct(text).expect("read directly");
            let slow = through_config(text, Map::new()).expect("config crate");
            assert_eq!(fast, slow, "{text}");
        }
    }

    #[test]
    fn what_might_read_differently_goes_through_the_config_crate() {
        for text in [
            "x = 1.5\n",
            "[a]\nwhen = 2026-01-01T00:00:00Z\n",
            "a = [1, 2.5]\n",
            "\"a.b\" = 1\n",
            "\"a[0]\" = 1\n",
            "a = 18446744073709551615\n",
            "a = \n",
            "[a]\nx = 1\n[a]\nx = 2\n",
        ] {
            assert!(direct(text).is_none(), "{text}");
        }
    }
}
