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

  def test_every_setting_is_read_from_cvsm_variables
    set_required_env
    ENV["CVSM_ENVIRONMENT"] = "staging"
    ENV["CVSM_CACHE_TTL"] = "5"
    ENV["CVSM_STALE_IF_ERROR"] = "300"
    client = Cvsm::Client.new
    assert_equal "http://127.0.0.1:5501/api/v1", client.base_url
    assert_equal "acme", client.team
    assert_equal "staging", client.environment
    assert_equal 5, client.cache_ttl
    assert_equal 300, client.stale_if_error
  end

  def test_defaults_are_production_30_seconds_10_second_timeout_and_2_retries
    set_required_env
    client = Cvsm::Client.new
    assert_equal({ base_url: "http://127.0.0.1:5501/api/v1", team: "acme", environment: "production",
                   cache_ttl: 30, timeout: 10, max_retries: 2, stale_if_error: 0, live: false }, client.config)
  end

  def test_explicit_keywords_win_over_cvsm_variables
    set_required_env
    ENV["CVSM_ENVIRONMENT"] = "staging"
    ENV["CVSM_CACHE_TTL"] = "5"
    ENV["CVSM_STALE_IF_ERROR"] = "300"
    client = Cvsm::Client.new(base_url: "https://vault.example.com/api/v1", team: "beta",
                              environment: "development", cache_ttl: 0, timeout: 2.5, max_retries: 0,
                              stale_if_error: 5)
    assert_equal({ base_url: "https://vault.example.com/api/v1", team: "beta", environment: "development",
                   cache_ttl: 0, timeout: 2.5, max_retries: 0, stale_if_error: 5, live: false }, client.config)
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

  def test_cvsm_stale_if_error_must_be_a_non_negative_integer
    set_required_env
    ["-1", "soon", "1.5", "10s"].each do |bad|
      ENV["CVSM_STALE_IF_ERROR"] = bad
      error = assert_raises(Cvsm::ConfigurationError, bad) { Cvsm::Client.new }
      assert_includes error.message, "CVSM_STALE_IF_ERROR"
    end
    ENV["CVSM_STALE_IF_ERROR"] = ""
    assert_equal 0, Cvsm::Client.new.stale_if_error, "empty counts as unset"
    ENV["CVSM_STALE_IF_ERROR"] = " 60 "
    assert_equal 60, Cvsm::Client.new.stale_if_error
  end

  def test_stale_if_error_on_stale_and_logger_are_checked
    set_required_env
    [{ stale_if_error: -1 }, { stale_if_error: "30" }, { stale_if_error: 1.5 }, { on_stale: "no" },
     { logger: $stderr }, { logger: Object.new }].each do |options|
      error = assert_raises(Cvsm::ConfigurationError, options.inspect) { Cvsm::Client.new(**options) }
      assert_includes error.message, options.keys.first.to_s
    end
  end

  def test_invalid_explicit_options_are_configuration_errors
    set_required_env
    [{ cache_ttl: -1 }, { cache_ttl: "30" }, { timeout: 0 }, { timeout: "fast" },
     { max_retries: -1 }, { max_retries: 1.5 }, { base_url: "ftp://example.com" },
     { base_url: "not a url" }, { token: 42 }].each do |options|
      assert_raises(Cvsm::ConfigurationError, options.inspect) { Cvsm::Client.new(**options) }
    end
  end

  # R6: whitespace around the token is trimmed; anything but visible ASCII left is refused.
  def test_whitespace_around_the_token_is_trimmed_from_option_and_variable
    _api, server = start_api
    ["#{TOKEN}\n", "  #{TOKEN}\r\n", "\t#{TOKEN} \n\n"].each do |padded|
      assert_equal({}, Cvsm::Client.new(token: padded, base_url: server.base_url, team: "acme").get_all)
      ENV["CVSM_TOKEN"] = padded
      assert_equal({}, Cvsm::Client.new(base_url: server.base_url, team: "acme").get_all)
    end
    assert_equal 6, server.log.size # six clients: one export each
    server.log.each { |request| assert_equal "Bearer #{TOKEN}", request.headers["authorization"] }
  end

  def test_token_with_inner_whitespace_control_or_non_ascii_characters_is_a_configuration_error
    set_required_env
    ["cvsm_ab cd", "cvsm_ab\tcd", "cvsm_ab\ncd", "cvsm_ab\0cd", "cvsm_ab\ecd", "cvsm_ab\x7fcd",
     "cvsm_abécd", "cvsm_\xff\xfe".b, "cvsm_\xffcd".dup.force_encoding("UTF-8")].each do |bad|
      error = assert_raises(Cvsm::ConfigurationError, bad.inspect) { Cvsm::Client.new(token: bad) }
      assert_includes error.message, "token holds a character other than visible ASCII"
      refute_includes error.message, "cvsm_"
      ENV["CVSM_TOKEN"] = bad.b.include?("\0") ? "cvsm_ab cd" : bad
      error = assert_raises(Cvsm::ConfigurationError, bad.inspect) { Cvsm::Client.new }
      assert_includes error.message, "CVSM_TOKEN holds a character"
      refute_includes error.message, "cvsm_"
    end
  end

  def test_blank_token_is_a_configuration_error
    set_required_env
    ENV["CVSM_TOKEN"] = " \n"
    assert_includes assert_raises(Cvsm::ConfigurationError) { Cvsm::Client.new }.message, "CVSM_TOKEN is blank"
  end

  def test_timeout_and_max_retries_are_read_from_cvsm_variables
    set_required_env
    ENV["CVSM_TIMEOUT"] = "2.5"
    ENV["CVSM_MAX_RETRIES"] = "0"
    assert_equal [2.5, 0], Cvsm::Client.new.config.values_at(:timeout, :max_retries)
    ENV["CVSM_TIMEOUT"] = "3"
    ENV["CVSM_MAX_RETRIES"] = "5"
    assert_equal [3, 5], Cvsm::Client.new.config.values_at(:timeout, :max_retries)
    assert_equal [1, 1], Cvsm::Client.new(timeout: 1, max_retries: 1).config.values_at(:timeout, :max_retries)
  end

  def test_invalid_cvsm_timeout_or_max_retries_is_a_configuration_error
    set_required_env
    { "CVSM_TIMEOUT" => %w[0 -1 abc 1s .], "CVSM_MAX_RETRIES" => %w[-1 1.5 two] }.each do |variable, values|
      values.each do |bad|
        ENV[variable] = bad
        error = assert_raises(Cvsm::ConfigurationError, "#{variable}=#{bad}") { Cvsm::Client.new }
        assert_includes error.message, variable
      end
      ENV.delete(variable)
    end
  end

  def test_ca_file_that_cannot_be_read_is_a_configuration_error_at_construction
    set_required_env
    Dir.mktmpdir do |dir|
      not_pem = File.join(dir, "not.pem").tap { |path| File.write(path, "hello") }
      empty = File.join(dir, "empty.pem").tap { |path| File.write(path, "") }
      [File.join(dir, "missing.pem"), dir, not_pem, empty].each do |path|
        error = assert_raises(Cvsm::ConfigurationError, path) { Cvsm::Client.new(ca_file: path) }
        assert_includes error.message, "ca_file #{path.inspect} cannot be used as a CA bundle"
        ENV["CVSM_CA_FILE"] = path
        error = assert_raises(Cvsm::ConfigurationError, path) { Cvsm::Client.new }
        assert_includes error.message, "CVSM_CA_FILE"
        ENV.delete("CVSM_CA_FILE")
      end
    end
    assert_raises(Cvsm::ConfigurationError) { Cvsm::Client.new(ca_file: 42) }
  end

  def test_ca_file_from_option_or_cvsm_ca_file
    set_required_env
    assert_equal TestPki.ca_file, Cvsm::Client.new(ca_file: TestPki.ca_file).ca_file
    assert_equal TestPki.ca_file, Cvsm::Client.new(ca_file: Pathname(TestPki.ca_file)).ca_file
    ENV["CVSM_CA_FILE"] = TestPki.ca_file
    assert_equal TestPki.ca_file, Cvsm::Client.new.ca_file
    ENV["CVSM_CA_FILE"] = ""
    assert_nil Cvsm::Client.new.ca_file
  end

  def test_http_factory_must_be_callable
    set_required_env
    assert_raises(Cvsm::ConfigurationError) { Cvsm::Client.new(http_factory: "Net::HTTP") }
  end

  def test_configuration_error_is_a_cvsm_error
    assert_raises(Cvsm::Error) { Cvsm::Client.new }
  end
end
