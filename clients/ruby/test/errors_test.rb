# frozen_string_literal: true

require_relative "test_helper"

# Error types per status, retries with backoff, timeouts and network failures.
class ErrorsTest < CvsmTest
  READ = %r{/secrets/by-name/[^/]+\z}.freeze
  LIST = %r{/secrets\z}.freeze

  # get("A") or get_all, by name.
  def read(client, call)
    call == :get ? client.get("A") : client.get_all
  end

  # How many reads by name +server+ received.
  def reads(server)
    paths(server).count { |path| READ.match?(path) }
  end

  def test_error_without_json_body_still_names_the_status
    api, server = start_api
    api.script(READ, [418, {}, "<html>teapot</html>"])
    error = assert_raises(Cvsm::ApiError) { client_for(server).get("A") }
    assert_equal 418, error.status
    assert_match(/\AHTTP 418/, error.message)
  end

  def test_backoff_sleeps_a_random_time_below_0_1_times_2_to_the_attempt
    api, server = start_api
    api.script(%r{/export\z}, json(503, {}), json(503, {}), json(503, {}))
    sleeps = []
    random = Object.new
    def random.rand = 0.99
    config = Cvsm::Configuration.new(token: TOKEN, base_url: server.base_url, team: "acme", max_retries: 3)
    transport = Cvsm::Transport.new(config, sleeper: ->(s) { sleeps << s }, random: random)
    transport.get_json("/teams/acme/secrets/export", { format: "json" })
    assert_equal 3, sleeps.size
    [0.1, 0.2, 0.4].zip(sleeps).each { |limit, slept| assert_in_delta limit * 0.99, slept, 1e-9 }
    real = Cvsm::Transport.new(config)
    100.times { assert_includes 0.0...0.1, real.backoff(0) }
  end

  # R1: the timeout covers the whole attempt, however slowly the answer drips in.
  def test_answer_dripping_its_headers_times_out_after_timeout_seconds
    assert_drip_times_out(json(200, "secret" => {}, "value" => "v"))
  end

  def assert_drip_times_out(response, headers_first: false)
    api, server = start_api
    dripped = headers_first ? [:drip_body, 0.05, response] : [:drip, 0.05, response]
    api.script(READ, dripped, dripped)
    client = client_for(server, timeout: 0.5, max_retries: 1)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    error = assert_raises(Cvsm::NetworkError) { client.get("A") }
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    assert_includes error.message, "timed out after 0.5s"
    assert_nil error.status
    assert_equal 2, reads(server)
    assert_operator elapsed, :>=, 0.95
    assert_operator elapsed, :<, 1.6, "two attempts of 0.5 s each, plus at most 0.1 s of backoff"
  end

  def test_a_timed_out_attempt_leaves_no_watchdog_thread_behind
    api, server = start_api
    api.script(READ, [:drip, 0.05, json(200, "secret" => {}, "value" => "v")])
    client = client_for(server, timeout: 0.3, max_retries: 0)
    assert_raises(Cvsm::NetworkError) { client.get("A") }
    assert_empty Thread.list.select { |t| t.name == "cvsm-deadline" && t.alive? }
  end

  def test_retry_after_http_date_is_rounded_up
    api, server = start_api
    api.script(READ, json(429, { "error" => "pelan" }, "Retry-After" => (Time.now + 30.5).httpdate))
    retry_after = assert_raises(Cvsm::RateLimitError) { client_for(server).get("A") }.retry_after
    assert_includes 29..31, retry_after # httpdate drops the fraction; the SDK rounds up
  end

  def test_every_error_has_every_field
    error = Cvsm::ApiError.new("HTTP 500", status: 500, request_id: "r")
    assert_equal ["HTTP 500", 500, nil, "r", nil],
                 [error.message, error.status, error.retry_after, error.request_id, error.suggestion]
    assert_equal 429, Cvsm::RateLimitError.new("slow", retry_after: 3).status
  end

  def test_every_error_is_a_cvsm_error
    [Cvsm::ConfigurationError, Cvsm::AuthenticationError, Cvsm::PermissionDeniedError,
     Cvsm::SecretNotFoundError, Cvsm::RateLimitError, Cvsm::ApiError, Cvsm::NetworkError].each do |klass|
      assert_operator klass, :<, Cvsm::Error
    end
    assert_operator Cvsm::Error, :<, StandardError
  end
end
