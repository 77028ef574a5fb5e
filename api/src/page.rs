//! Paging and filtering of the list routes (`GET /v1/vips`, `GET /v1/vips/{vip}/backends`):
//! `?offset=N&limit=N&name=TEXT`. The answer stays a JSON array in config order; the
//! `X-Total-Count` header says how many items matched the filter before paging, so a client
//! of 10,000 VIPs reads one screen at a time.

use std::fmt::Write as _;

/// The response header carrying the number of items that matched before paging.
pub const TOTAL_HEADER: &str = "x-total-count";

/// Which part of a list to return.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// Items to skip (after filtering).
    pub offset: usize,
    /// Most items to return; `None` returns every one from `offset`.
    pub limit: Option<usize>,
    /// Only items whose name (VIPs) or `address:port` (backends) contains this text,
    /// compared without regard to ASCII case.
    pub name: Option<String>,
}

/// Why a page's query string was refused; names the parameter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("unknown query parameter {0:?} (expected offset, limit or name)")]
    Unknown(String),
    #[error("{param} must be a whole number, got {value:?}")]
    NotANumber { param: &'static str, value: String },
}

impl PageError {
    /// The query parameter at fault.
    pub fn param(&self) -> &str {
        match self {
            PageError::Unknown(p) => p,
            PageError::NotANumber { param, .. } => param,
        }
    }
}

impl Page {
    /// The page from decoded query pairs.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Page, PageError> {
        let mut p = Page::default();
        let num = |param: &'static str, v: &str| {
            v.parse::<usize>().map_err(|_| PageError::NotANumber {
                param,
                value: v.to_string(),
            })
        };
        for (k, v) in pairs {
            match k {
                "offset" => p.offset = num("offset", v)?,
                "limit" => p.limit = Some(num("limit", v)?),
                "name" => p.name = (!v.is_empty()).then(|| v.to_string()),
                other => return Err(PageError::Unknown(other.to_string())),
            }
        }
        Ok(p)
    }

    /// Whether `name` passes the filter.
    pub fn matches(&self, name: &str) -> bool {
        self.name
            .as_ref()
            .is_none_or(|f| name.to_ascii_lowercase().contains(&f.to_ascii_lowercase()))
    }

    /// The window of `total` filtered items this page returns.
    pub fn window(&self, total: usize) -> std::ops::Range<usize> {
        let start = self.offset.min(total);
        let end = self
            .limit
            .map_or(total, |l| start.saturating_add(l).min(total));
        start..end
    }

    /// The query string (`?offset=..`, empty for the whole list), percent-encoded.
    pub fn query(&self) -> String {
        let mut q = String::new();
        let mut add = |k: &str, v: &str| {
            q.push(if q.is_empty() { '?' } else { '&' });
            let _ = write!(q, "{k}={v}");
        };
        if self.offset > 0 {
            add("offset", &self.offset.to_string());
        }
        if let Some(l) = self.limit {
            add("limit", &l.to_string());
        }
        if let Some(n) = &self.name {
            add("name", &crate::client::seg(n));
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_round_trips_through_its_query_and_windows_the_list() {
        let p = Page {
            offset: 20,
            limit: Some(10),
            name: Some("web a&b".into()),
        };
        assert_eq!(p.query(), "?offset=20&limit=10&name=web%20a%26b");
        let back = Page::from_pairs([("offset", "20"), ("limit", "10"), ("name", "web a&b")]);
        assert_eq!(back, Ok(p.clone()));
        assert_eq!(p.window(100), 20..30);
        assert_eq!(p.window(25), 20..25);
        assert_eq!(p.window(5), 5..5, "past the end: empty");
        assert_eq!(Page::default().window(7), 0..7);
        assert_eq!(Page::default().query(), "");
        assert!(p.matches("WEB A&B-1") && !p.matches("web"));
        assert!(Page::default().matches("anything"));
        assert_eq!(
            Page::from_pairs([("limit", "ten")]),
            Err(PageError::NotANumber {
                param: "limit",
                value: "ten".into()
            })
        );
        let e = Page::from_pairs([("sort", "name")]).unwrap_err();
        assert_eq!(e.param(), "sort");
    }
}
