//! Proxies from the environment, decided once when a client is built.
//!
//! A client talks to one host (its base URL; redirects are never followed),
//! so the proxy decision is made for that host when the client is created:
//! `http_proxy`/`HTTP_PROXY` for an `http://` base URL,
//! `https_proxy`/`HTTPS_PROXY` for an `https://` one (lowercase first; an
//! empty variable counts as unset), unless the host matches
//! `no_proxy`/`NO_PROXY`. ureq's own `Proxy::try_from_env` is not used: it
//! picks one proxy for every scheme (`ALL_PROXY`, then `HTTPS_PROXY`, then
//! `HTTP_PROXY`) and is read only from `Agent` defaults.

use std::net::IpAddr;

use crate::error::{Error, Result};

/// Target is the scheme, host and port a client connects to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub https: bool,
    /// host in lowercase, without IPv6 brackets.
    pub host: String,
    pub port: u16,
}

impl Target {
    /// parse reads the scheme, host and port of an `http(s)://` URL.
    pub fn parse(url: &str) -> Option<Target> {
        let (https, rest) = if let Some(rest) = strip_prefix_ignore_case(url, "https://") {
            (true, rest)
        } else {
            (false, strip_prefix_ignore_case(url, "http://")?)
        };
        let authority = rest.split(['/', '?', '#']).next()?;
        let authority = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        let (host, port) = split_host_port(authority)?;
        let port = match port {
            Some(port) => port.parse().ok()?,
            None if https => 443,
            None => 80,
        };
        (!host.is_empty()).then(|| Target {
            https,
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// split_host_port splits `host`, `host:port`, `[v6]` or `[v6]:port`; a bare
/// IPv6 address (more than one `:`) is all host.
fn split_host_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    match authority.split_once(':') {
        Some((host, port)) if !port.contains(':') => Some((host, Some(port))),
        _ => Some((authority, None)),
    }
}

/// from_env returns the proxy the environment asks for when connecting to
/// `base_url`, or `None` to connect directly.
pub(crate) fn from_env(base_url: &str) -> Result<Option<ureq::Proxy>> {
    let Some(target) = Target::parse(base_url) else {
        return Ok(None);
    };
    let names = if target.https {
        ["https_proxy", "HTTPS_PROXY"]
    } else {
        ["http_proxy", "HTTP_PROXY"]
    };
    let Some((name, proxy)) = first_set(&names) else {
        return Ok(None);
    };
    if let Some((_, no_proxy)) = first_set(&["no_proxy", "NO_PROXY"]) {
        if bypasses(&no_proxy, &target) {
            return Ok(None);
        }
    }
    // The value may hold credentials: the message names only the variable.
    ureq::Proxy::new(proxy.trim())
        .map(Some)
        .map_err(|_| Error::configuration(format!("{name} is not a valid proxy URL")))
}

/// first_set returns the first variable of `names` that is set and not empty.
fn first_set(names: &[&'static str]) -> Option<(&'static str, String)> {
    names.iter().find_map(|name| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (*name, v))
    })
}

/// bypasses reports whether `no_proxy` (comma- or space-separated entries)
/// exempts `target`. An entry is `*` (everything); a host name, which also
/// matches its subdomains (a leading `.` or `*.` is ignored); an IP address;
/// an IP network in CIDR form (`10.0.0.0/8`); any of them but `*` may carry
/// a `:port`, and then matches that port only.
pub(crate) fn bypasses(no_proxy: &str, target: &Target) -> bool {
    let host = target.host.trim_end_matches('.');
    let host_ip: Option<IpAddr> = host.parse().ok();
    no_proxy
        .split([',', ' ', '\t'])
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .any(|entry| {
            if entry == "*" {
                return true;
            }
            let (pattern, port) = if let Some((net, bits)) = entry.split_once('/') {
                // CIDR: never carries a port.
                return match (host_ip, net.parse::<IpAddr>(), bits.parse::<u8>()) {
                    (Some(ip), Ok(net), Ok(bits)) => in_network(ip, net, bits),
                    _ => false,
                };
            } else {
                match split_host_port(entry) {
                    Some(split) => split,
                    None => return false,
                }
            };
            if let Some(port) = port {
                if port.parse::<u16>().ok() != Some(target.port) {
                    return false;
                }
            }
            if let (Some(ip), Ok(entry_ip)) = (host_ip, pattern.parse::<IpAddr>()) {
                return ip == entry_ip;
            }
            let pattern = pattern
                .trim_start_matches("*.")
                .trim_start_matches('.')
                .trim_end_matches('.')
                .to_ascii_lowercase();
            !pattern.is_empty()
                && (host == pattern
                    || host
                        .strip_suffix(pattern.as_str())
                        .is_some_and(|head| head.ends_with('.')))
        })
}

fn in_network(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Target {
        Target::parse(url).unwrap_or_else(|| panic!("{url} should parse"))
    }

    #[test]
    fn target_reads_scheme_host_and_port() {
        let t = target("https://Cvsm.Example.com/api/v1");
        assert_eq!(
            (t.https, t.host.as_str(), t.port),
            (true, "cvsm.example.com", 443)
        );
        let t = target("http://127.0.0.1:5501/api/v1");
        assert_eq!(
            (t.https, t.host.as_str(), t.port),
            (false, "127.0.0.1", 5501)
        );
        let t = target("http://user:pw@[::1]:8080/x");
        assert_eq!((t.host.as_str(), t.port), ("::1", 8080));
        let t = target("HTTP://host?x=1");
        assert_eq!((t.https, t.host.as_str(), t.port), (false, "host", 80));
        for bad in [
            "ftp://host",
            "host:80",
            "http://",
            "http://host:port/",
            "http://[::1/",
        ] {
            assert_eq!(Target::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn no_proxy_entries_match_hosts_domains_ips_networks_and_ports() {
        let t = target("http://api.cvsm.example.com:8443/api/v1");
        for yes in [
            "*",
            "api.cvsm.example.com",
            "API.CVSM.EXAMPLE.COM",
            "cvsm.example.com",
            ".example.com",
            "*.example.com",
            "example.com.",
            "other, example.com",
            "other example.com",
            "example.com:8443",
        ] {
            assert!(bypasses(yes, &t), "{yes:?} should match");
        }
        for no in [
            "",
            "other.com",
            "ample.com",
            "xapi.cvsm.example.com",
            "example.com:80",
            "*.other",
        ] {
            assert!(!bypasses(no, &t), "{no:?} should not match");
        }

        let ip = target("http://127.0.0.1:5501/api/v1");
        for yes in [
            "127.0.0.1",
            "localhost,127.0.0.1",
            "127.0.0.0/8",
            "127.0.0.1:5501",
            "0.0.0.0/0",
        ] {
            assert!(bypasses(yes, &ip), "{yes:?} should match");
        }
        for no in [
            "localhost",
            "127.0.0.2",
            "10.0.0.0/8",
            "127.0.0.1:80",
            "127.0.0.1/40",
            "::1",
        ] {
            assert!(!bypasses(no, &ip), "{no:?} should not match");
        }

        let v6 = target("http://[::1]:8080/");
        for yes in ["::1", "[::1]", "[::1]:8080", "::/0", "::1/128"] {
            assert!(bypasses(yes, &v6), "{yes:?} should match");
        }
        assert!(!bypasses("[::1]:80", &v6));
    }
}
