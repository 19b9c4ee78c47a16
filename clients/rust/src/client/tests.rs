//! Unit tests of the client's private rules: secret names, which errors may
//! serve a kept value, and what a served value prints.

use super::*;

#[test]
fn secret_names_are_letters_digits_and_underscores() {
    for good in ["A", "_", "a_1", "DATABASE_URL", "_9", &"A".repeat(255)] {
        assert!(is_secret_name(good), "{good}");
    }
    for bad in [
        "",
        "1A",
        "A-B",
        "A B",
        "A.B",
        "É",
        "A\0",
        "A=B",
        &"A".repeat(256),
    ] {
        assert!(!is_secret_name(bad), "{bad:?}");
    }
    assert!(
        is_variable_name(&"A".repeat(300)),
        "no length limit for inject"
    );
}

#[test]
fn only_network_errors_5xx_and_429_may_serve_stale_values() {
    let api = |status| Error::Api {
        status,
        message: String::new(),
        request_id: None,
    };
    assert!(may_serve_stale(&Error::network("")));
    for status in [500, 502, 503, 504, 599] {
        assert!(may_serve_stale(&api(status)), "{status}");
    }
    assert!(may_serve_stale(&Error::RateLimited {
        status: 429,
        retry_after: None,
        message: String::new(),
        request_id: None,
    }));
    for status in [301, 409, 418] {
        assert!(!may_serve_stale(&api(status)), "{status}");
    }
    assert!(!may_serve_stale(&Error::configuration("")));
    assert!(!may_serve_stale(&Error::not_found(
        String::new(),
        None,
        None
    )));
    assert!(!may_serve_stale(&Error::Authentication {
        status: 401,
        message: String::new(),
        request_id: None,
    }));
    assert!(!may_serve_stale(&Error::decryption("", None)));
    assert!(!may_serve_stale(&Error::PermissionDenied {
        status: 403,
        message: String::new(),
        request_id: None,
    }));
}

#[test]
fn served_debug_never_shows_the_value() {
    let served = Served {
        value: "top-secret-value".to_string(),
        stale: Some(Error::network("network error: the connection was dropped")),
    };
    let printed = format!("{served:?} {served:#?}");
    assert!(!printed.contains("top-secret-value"), "{printed}");
    assert!(printed.contains("dropped"), "{printed}");
    assert!(served.is_stale());
}
