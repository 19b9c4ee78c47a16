# frozen_string_literal: true

require "open3"
require_relative "test_helper"

# The conformance driver: one long-lived process speaking line-delimited JSON.
class DriverTest < CvsmTest
  DRIVER = File.expand_path("../conformance/driver.rb", __dir__)

  def with_driver
    Open3.popen3(RbConfig.ruby, DRIVER) do |stdin, stdout, _stderr, wait|
      id = 0
      call = lambda do |op, args = {}|
        id += 1
        stdin.puts(JSON.generate("id" => id, "op" => op, "args" => args))
        response = JSON.parse(stdout.gets)
        assert_equal id, response["id"]
        response
      end
      yield call, stdin
      stdin.close
      assert_equal 0, wait.value.exitstatus
    end
  end

  def test_session_reads_values_maps_error_kinds_and_never_describes_the_token
    api, server = start_api
    api.add_secret("DATABASE_URL", "postgres://db")
    with_driver do |call, _stdin|
      missing = call.call("new_client", "options" => { "base_url" => server.base_url, "team" => "acme" })
      assert_equal "configuration", missing.dig("error", "kind")
      assert_includes missing.dig("error", "message"), "CVSM_TOKEN"

      call.call("set_env", "set" => { "CVSM_TOKEN" => TOKEN }, "unset" => [])
      created = call.call("new_client", "options" => { "base_url" => "#{server.base_url}/", "team" => "acme" })
      assert_equal({ "base_url" => server.base_url, "team" => "acme", "environment" => "production",
                     "cache_ttl" => 30, "timeout" => 10, "max_retries" => 2, "stale_if_error" => 0 },
                   created.dig("result", "config"))

      assert_equal "postgres://db", call.call("get", "name" => "DATABASE_URL").dig("result", "value")
      not_found = call.call("get", "name" => "database_url")
      assert_equal({ "kind" => "not_found", "status" => 404, "retry_after" => nil,
                     "message" => 'secret "database_url" not found in production; did you mean "DATABASE_URL"?',
                     "request_id" => "req-2", "suggestion" => "DATABASE_URL" },
                   not_found["error"])

      text = call.call("describe").dig("result", "text")
      refute_includes text, TOKEN
      refute_includes text, "postgres://db"

      assert_equal({ "DATABASE_URL" => "postgres://db" }, call.call("get_all").dig("result", "values"))
      call.call("set_env", "set" => {}, "unset" => ["DATABASE_URL"])
      assert_equal ["DATABASE_URL"], call.call("inject").dig("result", "names")
      assert_equal({ "DATABASE_URL" => "postgres://db", "NOPE" => nil },
                   call.call("get_env", "names" => %w[DATABASE_URL NOPE]).dig("result", "values"))
      assert_equal({}, call.call("clear_cache")["result"])
      assert_equal "unsupported", call.call("fly").dig("error", "kind")
      assert_equal({}, call.call("shutdown")["result"])
    end
  end

  def test_rate_limit_error_reports_status_and_retry_after
    api, server = start_api
    api.script(%r{/by-name/A\z}, json(429, { "error" => "pelan" }, "Retry-After" => "3"))
    with_driver do |call, _stdin|
      call.call("new_client", "options" => { "token" => TOKEN, "base_url" => server.base_url, "team" => "acme" })
      error = call.call("get", "name" => "A")["error"]
      assert_equal ["rate_limited", 429, 3], error.values_at("kind", "status", "retry_after")
    end
  end

  # R14: stale_if_error passes through, and "stale" => true appears only when the SDK's
  # on_stale hook reported a kept value.
  def test_reads_served_stale_are_marked_and_fresh_ones_are_not
    api, server = start_api
    api.add_secret("KEPT", "kept-value")
    with_driver do |call, _stdin|
      created = call.call("new_client", "options" => { "token" => TOKEN, "base_url" => server.base_url, "team" => "acme",
                                                       "cache_ttl" => 0, "stale_if_error" => 30, "max_retries" => 0 })
      assert_equal 30, created.dig("result", "config", "stale_if_error")
      assert_equal({ "value" => "kept-value" }, call.call("get", "name" => "KEPT")["result"])
      assert_equal({ "values" => { "KEPT" => "kept-value" } }, call.call("get_all")["result"])

      api.script(/./, json(503, "error" => "sibuk"), json(503, "error" => "sibuk"))
      assert_equal({ "value" => "kept-value", "stale" => true }, call.call("get", "name" => "KEPT")["result"])
      assert_equal({ "values" => { "KEPT" => "kept-value" }, "stale" => true }, call.call("get_all")["result"])
      assert_equal({ "value" => "kept-value" }, call.call("get", "name" => "KEPT")["result"], "fresh again")

      api.script(/./, json(503, "error" => "sibuk"))
      call.call("clear_cache")
      assert_equal ["api", 503], call.call("get", "name" => "KEPT")["error"].values_at("kind", "status")
    end
  end

  # An end-to-end team through the driver: the token passes through with its key part, values
  # come back opened, and a value that does not open is kind "decryption".
  def test_end_to_end_reads_and_the_decryption_kind
    api, server = start_api
    api.add_secret("DATABASE_URL", "postgres://db")
    private_key, public_key = E2ESeal.key_pair
    token = api.end_to_end!(private_key, public_key)
    with_driver do |call, _stdin|
      call.call("new_client", "options" => { "token" => token, "base_url" => server.base_url, "team" => "acme",
                                             "max_retries" => 2 })
      assert_equal({ "value" => "postgres://db" }, call.call("get", "name" => "DATABASE_URL")["result"])
      assert_equal({ "values" => { "DATABASE_URL" => "postgres://db" } }, call.call("get_all")["result"])
      text = call.call("describe").dig("result", "text")
      refute_includes text, token.split(".").last
      refute_includes text, "postgres://db"

      sealed = api.envelope("DATABASE_URL")
      api.script(%r{/by-name/}, json(200, "secret" => { "id" => "x" }, "value" => sealed.sub(/.\z/) { |c| c == "A" ? "B" : "A" },
                                          "e2e" => true))
      call.call("clear_cache")
      error = call.call("get", "name" => "DATABASE_URL")["error"]
      assert_equal ["decryption", nil, nil, "req-4"], error.values_at("kind", "status", "suggestion", "request_id")
      assert_includes error["message"], "DATABASE_URL"
      refute_includes error["message"], "postgres://db"
    end
  end
end
