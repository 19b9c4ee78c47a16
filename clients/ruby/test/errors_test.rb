# frozen_string_literal: true

require_relative "test_helper"

# Error types per status, retries with backoff, timeouts and network failures.
class ErrorsTest < CvsmTest
  LIST = %r{/secrets\z}.freeze

  # get("A") or get_all, by name.
  def read(client, call)
    call == :get ? client.get("A") : client.get_all
  end

  def list_requests(server)
    paths(server).count { |path| path.end_with?("/secrets") }
  end

  def test_each_status_raises_its_error_type_with_status_and_server_message
    {
      401 => Cvsm::AuthenticationError, 403 => Cvsm::PermissionDeniedError,
      409 => Cvsm::ApiError, 422 => Cvsm::ApiError, 500 => Cvsm::ApiError
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

  # R1: the timeout covers the whole attempt, however slowly the answer drips in.
  def test_answer_dripping_its_headers_times_out_after_timeout_seconds
    assert_drip_times_out(json(200, "secrets" => []))
  end

  def test_answer_dripping_its_body_times_out_after_timeout_seconds
    body = JSON.generate("secrets" => [], "padding" => "x" * 200)
    assert_drip_times_out([200, { "Content-Type" => "application/json" }, body], headers_first: true)
  end

  def assert_drip_times_out(response, headers_first: false)
    api, server = start_api
    dripped = headers_first ? [:drip_body, 0.05, response] : [:drip, 0.05, response]
    api.script(LIST, dripped, dripped)
    client = client_for(server, timeout: 0.5, max_retries: 1)
    client.get_all # resolves the team before timing
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    error = assert_raises(Cvsm::NetworkError) { client.get("A") }
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    assert_includes error.message, "timed out after 0.5s"
    assert_nil error.status
    assert_equal 2, list_requests(server)
    assert_operator elapsed, :>=, 0.95
    assert_operator elapsed, :<, 1.6, "two attempts of 0.5 s each, plus at most 0.1 s of backoff"
  end

  def test_a_timed_out_attempt_leaves_no_watchdog_thread_behind
    api, server = start_api
    api.script(LIST, [:drip, 0.05, json(200, "secrets" => [])])
    client = client_for(server, timeout: 0.3, max_retries: 0)
    client.get_all
    assert_raises(Cvsm::NetworkError) { client.get("A") }
    assert_empty Thread.list.select { |t| t.name == "cvsm-deadline" && t.alive? }
  end

  # R3: a 2xx answer of the wrong shape is unreadable: retried, then a network error.
  def test_each_unreadable_shape_is_retried_then_a_network_error
    {
      %r{/teams\z} => [nil, { "teams" => {} }, { "other" => [] }, []],
      LIST => [nil, {}, { "secrets" => "A" }],
      %r{/secrets/0[^/]*\z} => [{ "value" => nil }, { "value" => 42 }, { "secret" => {} }],
      %r{/export\z} => [nil, ["A"], 42, { "A" => nil }, { "A" => 1 }, { "A" => ["x"] }, { "A" => { "b" => "c" } }]
    }.each do |pattern, bodies|
      bodies.each do |body|
        api, server = start_api
        api.add_secret("A", "1")
        api.script(pattern, *Array.new(3) { json(200, body) })
        client = client_for(server)
        error = assert_raises(Cvsm::NetworkError, "#{pattern.source} #{body.inspect}") do
          pattern.source.include?("export") ? client.get_all : client.get("A")
        end
        assert_nil error.status
        assert_match(/unreadable response \(HTTP 200: not /, error.message)
        assert_equal 3, server.log.count { |r| pattern.match?(r.path) }, "#{pattern.source} #{body.inspect}"
      end
    end
  end

  def test_unreadable_answer_once_is_retried_and_the_call_succeeds
    api, server = start_api
    api.add_secret("A", "1")
    api.script(%r{/export\z}, json(200, { "A" => nil }))
    assert_equal({ "A" => "1" }, client_for(server).get_all)
    assert_equal 2, paths(server).count { |path| path.end_with?("/export") }
  end

  # R4: Retry-After as delay-seconds, an HTTP date, or anything else.
  def test_retry_after_forms
    now = Time.now
    {
      "0" => 0, "7" => 7, " 12 " => 12, "-3" => nil, "1.5" => nil, "soon" => nil, "" => nil,
      (now + 120.2).httpdate => [120, 121], (now - 3600).httpdate => 0,
      "Sun, 06 Nov 1994 08:49:37 GMT" => 0
    }.each do |header, expected|
      api, server = start_api
      api.script(LIST, json(429, { "error" => "pelan" }, "Retry-After" => header))
      error = assert_raises(Cvsm::RateLimitError) { client_for(server).get("A") }
      case expected
      when nil then assert_nil error.retry_after, header
      when Array then assert_includes expected, error.retry_after, header
      else assert_equal expected, error.retry_after, header
      end
    end
  end

  def test_retry_after_http_date_is_rounded_up
    api, server = start_api
    api.script(LIST, json(429, { "error" => "pelan" }, "Retry-After" => (Time.now + 30.5).httpdate))
    retry_after = assert_raises(Cvsm::RateLimitError) { client_for(server).get("A") }.retry_after
    assert_includes 29..31, retry_after # httpdate drops the fraction; the SDK rounds up
  end

  # R5: a redirect is an API error; the token never travels to its Location.
  def test_redirect_is_an_api_error_and_is_not_followed
    _other_api, other = start_api
    [301, 302, 303, 307, 308].each do |status|
      api, server = start_api
      api.script(LIST, [status, { "Location" => "#{other.base_url}/teams/#{FakeApi::TEAM_ID}/secrets" }, ""])
      error = assert_raises(Cvsm::ApiError, status.to_s) { client_for(server).get("A") }
      assert_equal status, error.status
      assert_includes error.message, "HTTP #{status}"
      assert_equal 1, list_requests(server)
    end
    assert_empty other.log
  end

  # R9: a wrong base URL, team or environment is a configuration error with the status.
  def test_404_to_the_teams_listing_or_export_is_a_configuration_error
    [[%r{/teams\z}, :get], [LIST, :get], [%r{/export\z}, :get_all]].each do |pattern, call|
      api, server = start_api
      api.add_secret("A", "1")
      api.script(pattern, json(404, "error" => "not found"))
      client = client_for(server)
      error = assert_raises(Cvsm::ConfigurationError, pattern.source) { read(client, call) }
      assert_equal 404, error.status
      assert_match(/\AHTTP 404: not found; check the base URL/, error.message)
      assert_match(/\Areq-\d+\z/, error.request_id)
    end
  end

  def test_base_url_without_api_v1_is_a_configuration_error
    _api, server = start_api
    client = Cvsm::Client.new(token: TOKEN, base_url: server.base_url.delete_suffix("/api/v1"), team: "acme")
    error = assert_raises(Cvsm::ConfigurationError) { client.get("A") }
    assert_equal 404, error.status
  end

  def test_unknown_team_id_is_a_configuration_error
    _api, server = start_api
    client = Cvsm::Client.new(token: TOKEN, base_url: server.base_url, team: "99999999-2222-4333-8444-555555555555")
    assert_equal 404, assert_raises(Cvsm::ConfigurationError) { client.get("A") }.status
    assert_equal 404, assert_raises(Cvsm::ConfigurationError) { client.get_all }.status
  end

  def test_400_to_the_listing_or_export_is_a_configuration_error
    [[LIST, :get], [%r{/export\z}, :get_all]].each do |pattern, call|
      api, server = start_api
      api.script(pattern, json(400, "error" => "invalid environment"))
      client = client_for(server, environment: "prod")
      error = assert_raises(Cvsm::ConfigurationError) { read(client, call) }
      assert_equal 400, error.status
      assert_includes error.message, "HTTP 400: invalid environment; check the environment"
    end
  end

  def test_404_to_the_value_request_stays_not_found
    api, server = start_api
    api.add_secret("A", "1")
    api.script(%r{/secrets/0[^/]*\z}, json(404, "error" => "secret not found"))
    error = assert_raises(Cvsm::SecretNotFoundError) { client_for(server).get("A") }
    assert_equal 404, error.status
    assert_equal "req-3", error.request_id
  end

  # R11: request_id and suggestion are fields of every error.
  def test_errors_carry_the_request_id_of_their_answer
    api, server = start_api
    api.script(LIST, json(403, { "error" => "tidak" }, "X-Request-Id" => "abc-123"))
    error = assert_raises(Cvsm::PermissionDeniedError) { client_for(server).get("A") }
    assert_equal "abc-123", error.request_id
    assert_nil error.suggestion

    api.script(LIST, json(429, { "error" => "pelan" }, "X-Request-Id" => "rate-1", "Retry-After" => "2"))
    error = assert_raises(Cvsm::RateLimitError) { client_for(server).get("A") }
    assert_equal ["rate-1", 2, 429], [error.request_id, error.retry_after, error.status]
  end

  def test_absent_name_carries_the_listings_request_id_and_the_suggestion
    api, server = start_api
    api.add_secret("API_KEY", "k")
    error = assert_raises(Cvsm::SecretNotFoundError) { client_for(server).get("api_key") }
    assert_equal "req-2", error.request_id
    assert_equal "API_KEY", error.suggestion
    assert_nil error.status
    missing = assert_raises(Cvsm::SecretNotFoundError) { client_for(server).get("OTHER") }
    assert_nil missing.suggestion
  end

  def test_errors_without_an_answer_have_no_request_id
    client = Cvsm::Client.new(token: TOKEN, base_url: "http://127.0.0.1:#{closed_port}/api/v1", team: FakeApi::TEAM_ID)
    error = assert_raises(Cvsm::NetworkError) { client.get("A") }
    assert_nil error.request_id
    assert_nil error.retry_after
    assert_nil assert_raises(Cvsm::ConfigurationError) { Cvsm::Client.new }.request_id
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
