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

  def test_a_timed_out_attempt_leaves_no_watchdog_thread_behind
    api, server = start_api
    api.script(READ, [:drip, 0.05, json(200, "secret" => {}, "value" => "v")])
    client = client_for(server, timeout: 0.3, max_retries: 0)
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
