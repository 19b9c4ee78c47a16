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
                     "cache_ttl" => 30, "timeout" => 10, "max_retries" => 2 }, created.dig("result", "config"))

      assert_equal "postgres://db", call.call("get", "name" => "DATABASE_URL").dig("result", "value")
      not_found = call.call("get", "name" => "database_url")
      assert_equal({ "kind" => "not_found", "status" => nil, "retry_after" => nil,
                     "message" => 'secret "database_url" not found in production; did you mean "DATABASE_URL"?',
                     "request_id" => "req-4", "suggestion" => "DATABASE_URL" },
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
    api.script(%r{/teams\z}, json(429, { "error" => "pelan" }, "Retry-After" => "3"))
    with_driver do |call, _stdin|
      call.call("new_client", "options" => { "token" => TOKEN, "base_url" => server.base_url, "team" => "acme" })
      error = call.call("get", "name" => "A")["error"]
      assert_equal ["rate_limited", 429, 3], error.values_at("kind", "status", "retry_after")
    end
  end
end
