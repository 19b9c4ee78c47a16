# frozen_string_literal: true

require_relative "test_helper"

# Configuration: explicit keywords, CVSM_* variables, defaults and configuration errors.
class ConfigurationTest < CvsmTest
  def set_required_env
    ENV["CVSM_TOKEN"] = TOKEN
    ENV["CVSM_BASE_URL"] = "http://127.0.0.1:5501/api/v1"
    ENV["CVSM_TEAM"] = "acme"
  end

  def test_every_setting_is_read_from_cvsm_variables
    set_required_env
    ENV["CVSM_ENVIRONMENT"] = "staging"
    ENV["CVSM_CACHE_TTL"] = "5"
    client = Cvsm::Client.new
    assert_equal "http://127.0.0.1:5501/api/v1", client.base_url
    assert_equal "acme", client.team
    assert_equal "staging", client.environment
    assert_equal 5, client.cache_ttl
  end

  def test_defaults_are_production_30_seconds_10_second_timeout_and_2_retries
    set_required_env
    client = Cvsm::Client.new
    assert_equal({ base_url: "http://127.0.0.1:5501/api/v1", team: "acme", environment: "production",
                   cache_ttl: 30, timeout: 10, max_retries: 2 }, client.config)
  end

  def test_explicit_keywords_win_over_cvsm_variables
    set_required_env
    ENV["CVSM_ENVIRONMENT"] = "staging"
    ENV["CVSM_CACHE_TTL"] = "5"
    client = Cvsm::Client.new(base_url: "https://vault.example.com/api/v1", team: "beta",
                              environment: "development", cache_ttl: 0, timeout: 2.5, max_retries: 0)
    assert_equal({ base_url: "https://vault.example.com/api/v1", team: "beta", environment: "development",
                   cache_ttl: 0, timeout: 2.5, max_retries: 0 }, client.config)
  end

  def test_trailing_slash_of_base_url_is_ignored
    set_required_env
    ENV["CVSM_BASE_URL"] = "http://127.0.0.1:5501/api/v1/"
    assert_equal "http://127.0.0.1:5501/api/v1", Cvsm::Client.new.base_url
    assert_equal "http://h/api/v1", Cvsm::Client.new(base_url: "http://h/api/v1//").base_url
  end

  def test_missing_token_base_url_or_team_names_the_variable
    { "CVSM_TOKEN" => :token, "CVSM_BASE_URL" => :base_url, "CVSM_TEAM" => :team }.each do |variable, _|
      set_required_env
      ENV.delete(variable)
      error = assert_raises(Cvsm::ConfigurationError) { Cvsm::Client.new }
      assert_includes error.message, "#{variable} is not set"
      assert_nil error.status
    end
  end

  def test_empty_variables_count_as_missing
    set_required_env
    ENV["CVSM_TOKEN"] = ""
    assert_raises(Cvsm::ConfigurationError) { Cvsm::Client.new }
  end

  def test_explicit_token_is_enough_without_cvsm_token
    set_required_env
    ENV.delete("CVSM_TOKEN")
    assert_equal "acme", Cvsm::Client.new(token: TOKEN).team
  end

  def test_cvsm_cache_ttl_must_be_a_non_negative_integer
    set_required_env
    %w[-1 abc 1.5 10s].each do |bad|
      ENV["CVSM_CACHE_TTL"] = bad
      error = assert_raises(Cvsm::ConfigurationError, bad) { Cvsm::Client.new }
      assert_includes error.message, "CVSM_CACHE_TTL"
    end
    ENV["CVSM_CACHE_TTL"] = "0"
    assert_equal 0, Cvsm::Client.new.cache_ttl
  end

  def test_invalid_explicit_options_are_configuration_errors
    set_required_env
    [{ cache_ttl: -1 }, { cache_ttl: "30" }, { timeout: 0 }, { timeout: "fast" },
     { max_retries: -1 }, { max_retries: 1.5 }, { base_url: "ftp://example.com" },
     { base_url: "not a url" }, { token: 42 }].each do |options|
      assert_raises(Cvsm::ConfigurationError, options.inspect) { Cvsm::Client.new(**options) }
    end
  end

  def test_configuration_error_is_a_cvsm_error
    assert_raises(Cvsm::Error) { Cvsm::Client.new }
  end
end
