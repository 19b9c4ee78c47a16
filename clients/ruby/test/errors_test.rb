# frozen_string_literal: true

require_relative "test_helper"

# Error types per status, retries with backoff, timeouts and network failures.
class ErrorsTest < CvsmTest
  def test_backoff_sleeps_a_random_time_below_0_1_times_2_to_the_attempt
    stub_api.faults({ path: "#{StubApi::SECRETS}/export", count: 3, status: 503 })
    sleeps = []
    random = Object.new
    def random.rand = 0.99
    config = Cvsm::Configuration.new(token: TOKEN, base_url: StubApi.shared.base_url, team: "acme", max_retries: 3)
    transport = Cvsm::Transport.new(config, sleeper: ->(s) { sleeps << s }, random: random)
    transport.get_json("/teams/acme/secrets/export", { format: "json" })
    assert_equal 3, sleeps.size
    [0.1, 0.2, 0.4].zip(sleeps).each { |limit, slept| assert_in_delta limit * 0.99, slept, 1e-9 }
    real = Cvsm::Transport.new(config)
    100.times { assert_includes 0.0...0.1, real.backoff(0) }
  end

  def test_a_timed_out_attempt_leaves_no_watchdog_thread_behind
    stub_api.faults({ path: StubApi::SECRETS, status: 200, body: '{"secret": {}, "value": "v"}', drip: 0.05 })
    client = stub_client(timeout: 0.3, max_retries: 0)
    assert_raises(Cvsm::NetworkError) { client.get("A") }
    assert_empty Thread.list.select { |t| t.name == "cvsm-deadline" && t.alive? }
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
