# frozen_string_literal: true

require "pathname"
require_relative "test_helper"

# Configuration: explicit keywords, CVSM_* variables, defaults and configuration errors.
class ConfigurationTest < CvsmTest
  def set_required_env
    ENV["CVSM_TOKEN"] = TOKEN
    ENV["CVSM_BASE_URL"] = "http://127.0.0.1:5501/api/v1"
    ENV["CVSM_TEAM"] = "acme"
  end

  # CVSM_BASE_URL's trailing slash is the conformance case configuration_from_environment.
  def test_trailing_slashes_of_the_base_url_option_are_ignored
    set_required_env
    assert_equal "http://h/api/v1", Cvsm::Client.new(base_url: "http://h/api/v1//").base_url
  end

  def test_explicit_token_is_enough_without_cvsm_token
    set_required_env
    ENV.delete("CVSM_TOKEN")
    assert_equal "acme", Cvsm::Client.new(token: TOKEN).team
  end

  def test_stale_if_error_on_stale_and_logger_are_checked
    set_required_env
    [{ stale_if_error: -1 }, { stale_if_error: "30" }, { stale_if_error: 1.5 }, { on_stale: "no" },
     { logger: $stderr }, { logger: Object.new }].each do |options|
      error = assert_raises(Cvsm::ConfigurationError, options.inspect) { Cvsm::Client.new(**options) }
      assert_includes error.message, options.keys.first.to_s
    end
  end

  # A blank CVSM_TOKEN and a CVSM_BASE_URL that is not http(s) are the conformance case
  # unusable_token_or_base_url_is_configuration_error; here the options' Ruby types.
  def test_invalid_explicit_options_are_configuration_errors
    set_required_env
    [{ cache_ttl: -1 }, { cache_ttl: "30" }, { timeout: 0 }, { timeout: "fast" },
     { max_retries: -1 }, { max_retries: 1.5 }, { base_url: "ftp://example.com" },
     { base_url: "not a url" }, { token: 42 }].each do |options|
      assert_raises(Cvsm::ConfigurationError, options.inspect) { Cvsm::Client.new(**options) }
    end
  end

  # ca_file and CVSM_CA_FILE are the conformance case private_ca_trusted_through_ca_file.
  def test_ca_file_may_be_a_pathname_and_an_empty_cvsm_ca_file_is_unset
    set_required_env
    assert_equal TestPki.ca_file, Cvsm::Client.new(ca_file: Pathname(TestPki.ca_file)).ca_file
    ENV["CVSM_CA_FILE"] = ""
    assert_nil Cvsm::Client.new.ca_file
  end

  def test_http_factory_must_be_callable
    set_required_env
    assert_raises(Cvsm::ConfigurationError) { Cvsm::Client.new(http_factory: "Net::HTTP") }
  end
end
