# frozen_string_literal: true

require_relative "test_helper"

# What the client sends and how it reads answers: paths, headers, team resolution, lookups.
class ClientTest < CvsmTest
  def test_get_lists_by_environment_and_name_then_reads_by_id_with_required_headers
    api, server = start_api
    id = api.add_secret("DATABASE_URL", "postgres://db")
    client = Cvsm::Client.new(token: TOKEN, base_url: server.base_url, team: FakeApi::TEAM_ID)

    assert_equal "postgres://db", client.get("DATABASE_URL")

    list, read = server.log
    assert_equal 2, server.log.size
    assert_equal "/api/v1/teams/#{FakeApi::TEAM_ID}/secrets", list.path
    assert_equal({ "environment" => "production", "search" => "DATABASE_URL" }, list.query)
    assert_equal "/api/v1/teams/#{FakeApi::TEAM_ID}/secrets/#{id}", read.path
    server.log.each do |request|
      assert_equal "GET", request.method
      assert_equal "Bearer #{TOKEN}", request.headers["authorization"]
      assert_equal "application/json", request.headers["accept"]
      assert_equal "cvsm-ruby/#{Cvsm::VERSION}", request.headers["user-agent"]
    end
  end

  def test_team_slug_is_resolved_once_per_client
    api, server = start_api
    api.add_secret("A", "1")
    api.add_secret("B", "2")
    client = client_for(server)
    client.get("A")
    client.get("B")
    assert_equal 1, paths(server).count("/teams")
    assert_equal "/teams", paths(server).first
    assert(paths(server).drop(1).all? { |path| path.start_with?("/teams/#{FakeApi::TEAM_ID}/") })
  end

  def test_team_slug_matching_none_of_the_callers_teams_is_a_configuration_error
    _api, server = start_api
    client = Cvsm::Client.new(token: TOKEN, base_url: server.base_url, team: "nope")
    error = assert_raises(Cvsm::ConfigurationError) { client.get("A") }
    assert_includes error.message, "nope"
  end

  def test_team_uuid_is_used_without_listing_teams
    api, server = start_api
    api.add_secret("A", "1")
    Cvsm::Client.new(token: TOKEN, base_url: server.base_url, team: FakeApi::TEAM_ID).get("A")
    refute_includes paths(server), "/teams"
  end

  def test_get_picks_the_exact_name_among_case_insensitive_matches
    api, server = start_api
    api.add_secret("api_key", "lower")
    api.add_secret("API_KEY", "upper")
    api.add_secret("API_KEY_OLD", "old")
    assert_equal "upper", client_for(server).get("API_KEY")
  end

  def test_absent_name_suggests_the_name_that_differs_only_in_case
    api, server = start_api
    api.add_secret("DATABASE_URL", "postgres://db")
    error = assert_raises(Cvsm::SecretNotFoundError) { client_for(server).get("database_url") }
    assert_equal 'secret "database_url" not found in production; did you mean "DATABASE_URL"?', error.message
    assert_nil error.status
  end

  def test_absent_name_without_a_similar_one_has_no_suggestion
    api, server = start_api
    api.add_secret("OTHER", "x")
    error = assert_raises(Cvsm::SecretNotFoundError) { client_for(server).get("MISSING") }
    assert_equal 'secret "MISSING" not found in production', error.message
  end

  def test_name_in_another_environment_is_not_found
    api, server = start_api
    api.add_secret("ONLY_STAGING", "s", environment: "staging")
    assert_raises(Cvsm::SecretNotFoundError) { client_for(server).get("ONLY_STAGING") }
    assert_equal "s", client_for(server, environment: "staging").get("ONLY_STAGING")
  end

  def test_get_all_uses_the_json_export_of_the_clients_environment
    api, server = start_api
    api.add_secret("A", "1")
    api.add_secret("B", "two words")
    api.add_secret("A", "dev", environment: "development")
    client = client_for(server)
    assert_equal({ "A" => "1", "B" => "two words" }, client.get_all)
    export = server.log.last
    assert_equal "/api/v1/teams/#{FakeApi::TEAM_ID}/secrets/export", export.path
    assert_equal({ "format" => "json", "environment" => "production" }, export.query)
    assert_equal({ "A" => "dev" }, client_for(server, environment: "development").get_all)
  end

  def test_values_keep_their_utf8_text
    api, server = start_api
    api.add_secret("GREETING", "héllo ✓")
    value = client_for(server).get("GREETING")
    assert_equal "héllo ✓", value
    assert_equal Encoding::UTF_8, value.encoding
  end

  def test_concurrent_gets_from_many_threads_return_the_right_values
    api, server = start_api
    10.times { |i| api.add_secret("S#{i}", "v#{i}") }
    client = client_for(server)
    results = Array.new(10) { |i| Thread.new { client.get("S#{i}") } }.map(&:value)
    assert_equal Array.new(10) { |i| "v#{i}" }, results
  end

  def test_unexpected_response_shape_is_a_network_error
    api, server = start_api
    api.script(%r{/export\z}, json(200, ["not", "an", "object"]))
    assert_raises(Cvsm::NetworkError) { client_for(server, max_retries: 0).get_all }
  end

  # R10: a name that is not a valid secret name is not found, without a request.
  def test_invalid_names_are_not_found_without_a_request
    _api, server = start_api
    client = client_for(server)
    invalid = ["", "1ABC", "A-B", "A B", "A.B", "A\0", "DATABASE_URL\n", "ÄPI", "A\xff".dup.force_encoding("UTF-8"),
               "A" * 256, nil, :A, 42]
    invalid.each do |name|
      error = assert_raises(Cvsm::SecretNotFoundError, name.inspect) { client.get(name) }
      assert_includes error.message, "is not valid"
      assert_nil error.status
      assert_nil error.request_id
    end
    assert_empty server.log
    long = assert_raises(Cvsm::SecretNotFoundError) { client.get("B" * 5000) }
    assert_operator long.message.length, :<, 200
  end

  def test_longest_valid_name_is_looked_up
    api, server = start_api
    api.add_secret("_#{'a' * 254}", "long")
    assert_equal "long", client_for(server).get("_#{'a' * 254}")
  end
end
