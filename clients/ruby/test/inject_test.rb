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

  def test_an_empty_existing_variable_counts_as_set
    server = start_with_secrets
    ENV["CVSMTEST_KEEP"] = ""
    refute_includes client_for(server).inject, "CVSMTEST_KEEP"
    assert_equal "", ENV["CVSMTEST_KEEP"]
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
