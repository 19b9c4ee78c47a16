# frozen_string_literal: true

require_relative "test_helper"

# What the client sends and how it reads answers: paths, headers, the team in the path, lookups.
class ClientTest < CvsmTest

  def test_team_and_name_are_percent_encoded_in_the_path
    _api, server = start_api
    client = Cvsm::Client.new(token: TOKEN, base_url: server.base_url, team: "ac/me ü", max_retries: 0)
    assert_raises(Cvsm::ConfigurationError) { client.get("A_1") }
    assert_equal "/api/v1/teams/ac%2Fme%20%C3%BC/secrets/by-name/A_1", server.log.first.target.split("?").first
  end

  def test_concurrent_gets_from_many_threads_return_the_right_values
    api, server = start_api
    10.times { |i| api.add_secret("S#{i}", "v#{i}") }
    client = client_for(server)
    results = Array.new(10) { |i| Thread.new { client.get("S#{i}") } }.map(&:value)
    assert_equal Array.new(10) { |i| "v#{i}" }, results
  end
end
