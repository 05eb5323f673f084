//! A request's URL: the path and the query string, percent-decoded, and the query's
//! parameters as Nomad parses them.

use super::*;

pub(super) fn split_url(url: &str) -> (String, String) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    (percent_decode(path, false), query.to_string())
}

/// Percent-decoding (an invalid escape is kept as it is, and bytes that are not UTF-8
/// become U+FFFD); `plus` turns `+` into a space (query strings).
pub(super) fn percent_decode(text: &str, plus: bool) -> String {
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8_lossy()
            .into_owned()
    };
    if plus && text.contains('+') {
        decode(&text.replace('+', " "))
    } else {
        decode(text)
    }
}

/// A request's method, as the routes tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Options,
    Post,
    Put,
    Delete,
    Other,
}

impl From<&str> for Method {
    fn from(name: &str) -> Method {
        match name {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "OPTIONS" => Method::Options,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            _ => Method::Other,
        }
    }
}

/// The query string's parameters (the last of a repeated one wins; [`Query::all`] has
/// each).
pub struct Query {
    params: BTreeMap<String, String>,
    pairs: Vec<(String, String)>,
    /// A blocking query's `wait` has passed: it answers what there is.
    pub(super) waited_out: bool,
}

impl Query {
    pub(super) fn parse(query: &str) -> Result<Query, ApiError> {
        let mut params = BTreeMap::new();
        let mut pairs = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (key, value) = (percent_decode(key, true), percent_decode(value, true));
            params.insert(key.clone(), value.clone());
            pairs.push((key, value));
        }
        Ok(Query {
            params,
            pairs,
            waited_out: false,
        })
    }

    /// Every value of a parameter given more than once (`address=a&address=b`), in order.
    pub(super) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }

    /// A boolean the way Go's `strconv.ParseBool` reads it; absent is `false`.
    pub(super) fn bool(&self, name: &str) -> Result<bool, ApiError> {
        match self.get(name) {
            None => Ok(false),
            Some(value) => parse_bool(value).ok_or_else(|| {
                error(
                    400,
                    format!(
                        "Failed to parse value of {name:?} ({value}) as a bool: expected one of \
                         1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False"
                    ),
                )
            }),
        }
    }

    pub(super) fn int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.get(name) {
            None | Some("") => Ok(None),
            Some(value) => value.parse().map(Some).map_err(|_| {
                error(
                    400,
                    format!("Failed to parse value of {name:?} ({value}) as an integer"),
                )
            }),
        }
    }
}

pub(super) fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// One of a bounded number of long-lived answers (followed logs, event streams), given back
/// when dropped.
pub(super) struct Slot(&'static std::sync::atomic::AtomicUsize);

impl Slot {
    /// A slot of `count`, unless `max` are taken.
    pub(super) fn take(count: &'static std::sync::atomic::AtomicUsize, max: usize) -> Option<Slot> {
        use std::sync::atomic::Ordering;
        if count.fetch_add(1, Ordering::SeqCst) >= max {
            count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Slot(count))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A small request body that is a JSON object (an empty body is an empty one): refused with
/// 413 past `max` bytes, and with 400 if it is not an object; `what` names it ("a restart").
pub(super) fn small_object(
    body: &[u8],
    max: usize,
    what: &str,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    if body.len() > max {
        return Err(error(413, format!("{what} request is at most {max} bytes")));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice(body).map_err(|e| error(400, format!("invalid JSON: {e}")))? {
        Value::Object(fields) => Ok(fields),
        _ => Err(error(400, format!("{what} request is a JSON object"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_parse_as_go_does_and_name_the_parameter_otherwise() {
        let query = Query::parse("purge=True&global=0&no_shutdown_delay=yes").unwrap();
        assert_eq!(query.bool("purge"), Ok(true));
        assert_eq!(query.bool("global"), Ok(false));
        assert_eq!(query.bool("absent"), Ok(false));
        let bad = query.bool("no_shutdown_delay").unwrap_err();
        assert_eq!(bad.status, 400);
        assert!(
            bad.message.contains("\"no_shutdown_delay\" (yes)"),
            "{}",
            bad.message
        );
    }

    #[test]
    fn go_durations_parse() {
        use quiesce_core::gotime::parse_go_duration;
        assert_eq!(parse_go_duration("2000ms"), Some(2_000_000_000));
        assert_eq!(parse_go_duration("1m30s"), Some(90_000_000_000));
        assert_eq!(parse_go_duration("1.5s"), Some(1_500_000_000));
        assert_eq!(parse_go_duration("0"), Some(0));
        assert_eq!(parse_go_duration("5"), None);
        assert_eq!(parse_go_duration("soon"), None);
    }

    #[test]
    fn paths_and_queries_are_percent_decoded() {
        assert_eq!(split_url("/v1/job/my%20job?x=1").0, "/v1/job/my job");
        let query = Query::parse("namespace=%2A&filter=a+b&a=1&a=%32&bad=%zz%4").unwrap();
        assert_eq!(query.get("namespace"), Some("*"));
        assert_eq!(query.get("filter"), Some("a b"));
        assert_eq!(query.all("a").collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(query.get("bad"), Some("%zz%4"));
        assert_eq!(
            split_url("/v1/job/%E5%AD%97%0A%FF").0,
            "/v1/job/字\n\u{fffd}"
        );
    }
}
