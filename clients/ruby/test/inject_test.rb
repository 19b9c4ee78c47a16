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

  # R8: every name and value is checked before anything is set.
  def test_a_value_with_nul_sets_nothing_and_names_the_secret_not_the_value
    api, server = start_api
    api.add_secret("CVSMTEST_A", "a-value")
    api.add_secret("CVSMTEST_NUL", "before\0after-secret")
    api.add_secret("CVSMTEST_Z", "z-value")
    error = assert_raises(Cvsm::ConfigurationError) { client_for(server).inject }
    assert_includes error.message, "CVSMTEST_NUL"
    assert_includes error.message, "NUL"
    refute_includes error.message, "after-secret"
    assert_nil error.status
    %w[CVSMTEST_A CVSMTEST_NUL CVSMTEST_Z].each { |name| assert_nil ENV.fetch(name, nil), name }
  end

  def test_a_name_that_is_not_a_variable_name_sets_nothing
    ["CVSMTEST-DASH", "1CVSMTEST", "CVSMTEST=X", "CVSMTEST SPACE", "CVSMTEST\0", "CVSMTÉST", ""].each do |bad|
      api, server = start_api
      api.add_secret("CVSMTEST_A", "a-value")
      api.add_secret(bad, "v")
      error = assert_raises(Cvsm::ConfigurationError, bad.inspect) { client_for(server).inject(overwrite: true) }
      assert_includes error.message, bad.inspect
      assert_includes error.message, "not a valid variable name"
      assert_nil ENV.fetch("CVSMTEST_A", nil)
    end
  end

  def test_a_nul_value_that_would_not_be_set_is_no_error
    api, server = start_api
    api.add_secret("CVSMTEST_KEEP", "x\0y")
    api.add_secret("CVSMTEST_A", "a")
    ENV["CVSMTEST_KEEP"] = "local"
    assert_equal ["CVSMTEST_A"], client_for(server).inject
    assert_raises(Cvsm::ConfigurationError) { client_for(server).inject(overwrite: true) }
    assert_equal "local", ENV["CVSMTEST_KEEP"]
  end
end
