# frozen_string_literal: true

require_relative "test_helper"

# What the client sends and how it reads answers: paths, headers, the team in the path, lookups.
class ClientTest < CvsmTest
  def test_get_is_one_read_by_name_with_the_required_headers
    api, server = start_api
    api.add_secret("DATABASE_URL", "postgres://db")
    client = Cvsm::Client.new(token: TOKEN, base_url: server.base_url, team: FakeApi::TEAM_ID)

    assert_equal "postgres://db", client.get("DATABASE_URL")

    assert_equal 1, server.log.size
    read = server.log.first
    assert_equal "GET", read.method
    assert_equal "/api/v1/teams/#{FakeApi::TEAM_ID}/secrets/by-name/DATABASE_URL", read.path
    assert_equal({ "environment" => "production" }, read.query)
    assert_equal "Bearer #{TOKEN}", read.headers["authorization"]
    assert_equal "application/json", read.headers["accept"]
    assert_equal "cvsm-ruby/#{Cvsm::VERSION}", read.headers["user-agent"]
  end

  def test_a_team_slug_goes_into_every_path_as_is_without_a_teams_lookup
    api, server = start_api
    api.add_secret("A", "1")
    api.add_secret("B", "2")
    client = client_for(server)
    client.get("A")
    client.get("B")
    client.get_all
    assert_equal ["/teams/acme/secrets/by-name/A", "/teams/acme/secrets/by-name/B", "/teams/acme/secrets/export"],
                 paths(server)
  end

  def test_team_and_name_are_percent_encoded_in_the_path
    _api, server = start_api
    client = Cvsm::Client.new(token: TOKEN, base_url: server.base_url, team: "ac/me ü", max_retries: 0)
    assert_raises(Cvsm::ConfigurationError) { client.get("A_1") }
    assert_equal "/api/v1/teams/ac%2Fme%20%C3%BC/secrets/by-name/A_1", server.log.first.target.split("?").first
  end

  def test_a_team_that_is_none_of_the_callers_is_a_configuration_error_after_the_listing
    _api, server = start_api
    client = Cvsm::Client.new(token: TOKEN, base_url: server.base_url, team: "nope")
    error = assert_raises(Cvsm::ConfigurationError) { client.get("A") }
    assert_equal 404, error.status
    assert_equal "req-2", error.request_id
    assert_equal ["/teams/nope/secrets/by-name/A", "/teams/nope/secrets"], paths(server)
    assert_equal({ "environment" => "production", "search" => "A" }, server.log.last.query)
  end

  def test_absent_name_is_not_found_after_one_listing
    api, server = start_api
    api.add_secret("OTHER", "x")
    error = assert_raises(Cvsm::SecretNotFoundError) { client_for(server).get("MISSING") }
    assert_equal 'secret "MISSING" not found in production', error.message
    assert_equal 404, error.status
    assert_equal "req-1", error.request_id, "the request id of the read by name"
    assert_nil error.suggestion
    assert_equal ["/teams/acme/secrets/by-name/MISSING", "/teams/acme/secrets"], paths(server)
  end

  def test_absent_name_suggests_the_name_that_differs_only_in_case
    api, server = start_api
    api.add_secret("DATABASE_URL", "postgres://db")
    error = assert_raises(Cvsm::SecretNotFoundError) { client_for(server).get("database_url") }
    assert_equal 'secret "database_url" not found in production; did you mean "DATABASE_URL"?', error.message
    assert_equal "DATABASE_URL", error.suggestion
    assert_equal 404, error.status
  end

  def test_a_listing_that_holds_the_exact_name_suggests_nothing
    api, server = start_api
    api.add_secret("KEPT", "v")
    api.add_secret("kept_other", "w")
    api.script(%r{/by-name/}, json(404, "error" => "secret tidak ditemukan"))
    error = assert_raises(Cvsm::SecretNotFoundError) { client_for(server).get("KEPT") }
    assert_equal 'secret "KEPT" not found in production', error.message
    assert_nil error.suggestion
  end

  def test_a_suggestion_is_never_a_secret_of_another_environment
    api, server = start_api
    api.add_secret("api_key", "s", environment: "staging")
    api.script(%r{/secrets\z}, json(200, "secrets" => [{ "name" => "api_key", "environment" => "staging" }]))
    assert_nil assert_raises(Cvsm::SecretNotFoundError) { client_for(server).get("API_KEY") }.suggestion
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
    assert_equal "/api/v1/teams/acme/secrets/export", export.path
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
      assert_includes error.message, "is not a valid secret name"
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
