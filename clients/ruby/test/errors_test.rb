# frozen_string_literal: true

require_relative "test_helper"

# Error types per status, retries with backoff, timeouts and network failures.
class ErrorsTest < CvsmTest
  LIST = %r{/secrets\z}.freeze

  def list_requests(server)
    paths(server).count { |path| path.end_with?("/secrets") }
  end

  def test_each_status_raises_its_error_type_with_status_and_server_message
    {
      401 => Cvsm::AuthenticationError, 403 => Cvsm::PermissionDeniedError,
      404 => Cvsm::SecretNotFoundError, 400 => Cvsm::ApiError, 409 => Cvsm::ApiError,
      500 => Cvsm::ApiError
    }.each do |status, klass|
      api, server = start_api
      api.script(LIST, json(status, "error" => "pesan #{status}"))
      error = assert_raises(klass, status.to_s) { client_for(server).get("A") }
      assert_kind_of Cvsm::Error, error
      assert_equal status, error.status
      assert_equal "HTTP #{status}: pesan #{status}", error.message
    end
  end

  def test_error_without_json_body_still_names_the_status
    api, server = start_api
    api.script(LIST, [418, {}, "<html>teapot</html>"])
    error = assert_raises(Cvsm::ApiError) { client_for(server).get("A") }
    assert_equal 418, error.status
    assert_match(/\AHTTP 418/, error.message)
  end

  def test_4xx_is_never_retried
    [400, 401, 403, 404, 409, 422].each do |status|
      api, server = start_api
      api.script(LIST, json(status, "error" => "tidak"), json(status, "error" => "tidak"))
      assert_raises(Cvsm::Error) { client_for(server).get("A") }
      assert_equal 1, list_requests(server), "status #{status} was retried"
    end
  end

  def test_500_is_not_retried
    api, server = start_api
    api.script(LIST, json(500, "error" => "x"), json(500, "error" => "x"))
    assert_raises(Cvsm::ApiError) { client_for(server).get("A") }
    assert_equal 1, list_requests(server)
  end

  def test_503_is_retried_until_it_succeeds
    api, server = start_api
    api.add_secret("A", "1")
    api.script(LIST, json(503, "error" => "sibuk"), [502, {}, ""])
    assert_equal "1", client_for(server).get("A")
    assert_equal 3, list_requests(server)
  end

  def test_504_after_all_retries_is_an_api_error_after_max_retries_plus_one_attempts
    api, server = start_api
    api.script(LIST, *Array.new(5) { json(504, "error" => "habis waktu") })
    error = assert_raises(Cvsm::ApiError) { client_for(server).get("A") }
    assert_equal 504, error.status
    assert_equal 3, list_requests(server)

    api, server = start_api
    api.script(LIST, *Array.new(5) { json(503, "error" => "sibuk") })
    assert_raises(Cvsm::ApiError) { client_for(server, max_retries: 0).get("A") }
    assert_equal 1, list_requests(server)
  end

  def test_429_raises_rate_limit_error_at_once_with_retry_after
    api, server = start_api
    api.script(LIST, json(429, { "error" => "terlalu banyak" }, "Retry-After" => "7"), json(200, "secrets" => []))
    error = assert_raises(Cvsm::RateLimitError) { client_for(server).get("A") }
    assert_equal 7, error.retry_after
    assert_equal 429, error.status
    assert_equal 1, list_requests(server)
  end

  def test_429_without_retry_after_has_nil_retry_after
    api, server = start_api
    api.script(LIST, json(429, "error" => "terlalu banyak"))
    assert_nil assert_raises(Cvsm::RateLimitError) { client_for(server).get("A") }.retry_after
  end

  def test_dropped_connection_is_retried_then_succeeds
    api, server = start_api
    api.add_secret("A", "1")
    api.script(LIST, :drop, :drop)
    assert_equal "1", client_for(server).get("A")
    assert_equal 3, list_requests(server)
  end

  def test_dropped_connections_after_all_retries_are_a_network_error
    api, server = start_api
    api.script(LIST, :drop, :drop, :drop, :drop)
    error = assert_raises(Cvsm::NetworkError) { client_for(server).get("A") }
    assert_nil error.status
    assert_equal 3, list_requests(server)
  end

  def test_connection_dropped_mid_response_is_retried_then_a_network_error
    api, server = start_api
    api.script(LIST, :drop_mid, :drop_mid, :drop_mid)
    assert_raises(Cvsm::NetworkError) { client_for(server).get("A") }
    assert_equal 3, list_requests(server)
  end

  def test_connection_refused_is_a_network_error
    client = Cvsm::Client.new(token: TOKEN, base_url: "http://127.0.0.1:#{closed_port}/api/v1",
                              team: FakeApi::TEAM_ID)
    assert_raises(Cvsm::NetworkError) { client.get("A") }
  end

  def test_slow_answer_times_out_as_a_network_error_after_timeout_seconds
    api, server = start_api
    api.script(LIST, [:delay, 2, json(200, "secrets" => [])])
    client = client_for(server, timeout: 0.3, max_retries: 0)
    client.get_all # resolves the team before timing
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert_raises(Cvsm::NetworkError) { client.get("A") }
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    assert_operator elapsed, :<, 1.5
    assert_operator elapsed, :>=, 0.25
  end

  def test_unreadable_success_body_is_retried_then_a_network_error
    api, server = start_api
    api.script(LIST, *Array.new(3) { [200, { "Content-Type" => "application/json" }, "{not json"] })
    assert_raises(Cvsm::NetworkError) { client_for(server).get("A") }
    assert_equal 3, list_requests(server)
  end

  def test_backoff_sleeps_a_random_time_below_0_1_times_2_to_the_attempt
    api, server = start_api
    api.script(%r{/teams\z}, json(503, {}), json(503, {}), json(503, {}))
    sleeps = []
    random = Object.new
    def random.rand = 0.99
    config = Cvsm::Configuration.new(token: TOKEN, base_url: server.base_url, team: "acme", max_retries: 3)
    transport = Cvsm::Transport.new(config, sleeper: ->(s) { sleeps << s }, random: random)
    transport.get_json("/teams")
    assert_equal 3, sleeps.size
    [0.1, 0.2, 0.4].zip(sleeps).each { |limit, slept| assert_in_delta limit * 0.99, slept, 1e-9 }
    real = Cvsm::Transport.new(config)
    100.times { assert_includes 0.0...0.1, real.backoff(0) }
  end

  def test_every_error_is_a_cvsm_error
    [Cvsm::ConfigurationError, Cvsm::AuthenticationError, Cvsm::PermissionDeniedError,
     Cvsm::SecretNotFoundError, Cvsm::RateLimitError, Cvsm::ApiError, Cvsm::NetworkError].each do |klass|
      assert_operator klass, :<, Cvsm::Error
    end
    assert_operator Cvsm::Error, :<, StandardError
  end
end
