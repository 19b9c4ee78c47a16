# frozen_string_literal: true

require_relative "test_helper"

# inject: copying get_all into ENV, keeping or overwriting existing variables.
class InjectTest < CvsmTest
  def start_with_secrets
    api, server = start_api
    api.add_secret("CVSMTEST_B", "b-value")
    api.add_secret("CVSMTEST_A", "a-value")
    api.add_secret("CVSMTEST_KEEP", "from-server")
    server
  end

  def test_inject_sets_missing_variables_keeps_existing_ones_and_returns_sorted_names
    server = start_with_secrets
    ENV["CVSMTEST_KEEP"] = "local"
    names = client_for(server).inject
    assert_equal %w[CVSMTEST_A CVSMTEST_B], names
    assert_equal "a-value", ENV["CVSMTEST_A"]
    assert_equal "b-value", ENV["CVSMTEST_B"]
    assert_equal "local", ENV["CVSMTEST_KEEP"]
  end

  def test_an_empty_existing_variable_counts_as_set
    server = start_with_secrets
    ENV["CVSMTEST_KEEP"] = ""
    refute_includes client_for(server).inject, "CVSMTEST_KEEP"
    assert_equal "", ENV["CVSMTEST_KEEP"]
  end

  def test_inject_with_overwrite_replaces_existing_variables
    server = start_with_secrets
    ENV["CVSMTEST_KEEP"] = "local"
    names = client_for(server).inject(overwrite: true)
    assert_equal %w[CVSMTEST_A CVSMTEST_B CVSMTEST_KEEP], names
    assert_equal "from-server", ENV["CVSMTEST_KEEP"]
  end

  def test_inject_uses_the_export_endpoint
    server = start_with_secrets
    client_for(server).inject
    assert(paths(server).last.end_with?("/secrets/export"))
  end
end
