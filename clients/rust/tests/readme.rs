//! The README's first code example is `examples/readme.rs`, byte for byte;
//! this test checks that, then runs the example against the shared stub
//! (conformance/stub.py).

mod support;

use support::{SharedStub, CONFIG_VARS, TOKEN};

/// The example, compiled into this test as the module `example`.
mod example {
    include!("../examples/readme.rs");

    pub fn run() -> Result<(), cvsm::Error> {
        main()
    }
}

const README: &str = include_str!("../README.md");
const EXAMPLE: &str = include_str!("../examples/readme.rs");

/// first_rust_block returns the body of the README's first ```rust block.
fn first_rust_block(markdown: &str) -> &str {
    let start = markdown.find("```rust\n").expect("a ```rust block") + "```rust\n".len();
    let length = markdown[start..].find("```\n").expect("the block's end");
    &markdown[start..start + length]
}

#[test]
fn the_first_readme_example_is_examples_readme_rs() {
    assert_eq!(
        first_rust_block(README),
        EXAMPLE,
        "copy examples/readme.rs into the README's first ```rust block (or back)"
    );
}

#[test]
fn the_first_readme_example_runs() {
    // This binary has one test that touches the environment: this one.
    let stub = SharedStub::start(&[
        ("DATABASE_URL", "postgres://db"),
        ("README_TEST_OTHER", "x"),
    ]);
    for name in CONFIG_VARS
        .iter()
        .chain(&["DATABASE_URL", "README_TEST_OTHER"])
    {
        std::env::remove_var(name);
    }
    std::env::set_var("CVSM_TOKEN", TOKEN);
    std::env::set_var("CVSM_BASE_URL", &stub.base_url);
    std::env::set_var("CVSM_TEAM", "acme");

    example::run().expect("the README example");

    assert_eq!(std::env::var("DATABASE_URL").unwrap(), "postgres://db");
    assert_eq!(std::env::var("README_TEST_OTHER").unwrap(), "x");
    assert_eq!(
        stub.targets(),
        vec![
            "/api/v1/teams/acme/secrets/by-name/DATABASE_URL?environment=production",
            "/api/v1/teams/acme/secrets/export?format=json&environment=production",
        ],
        "one request per call, the slug in the path"
    );
}
