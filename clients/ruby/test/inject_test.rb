# frozen_string_literal: true

require_relative "test_helper"

# inject: copying get_all into ENV, keeping or overwriting existing variables.
class InjectTest < CvsmTest
  def test_an_empty_existing_variable_counts_as_set
    stub_api("CVSMTEST_A" => "a-value", "CVSMTEST_KEEP" => "from-server")
    ENV["CVSMTEST_KEEP"] = ""
    assert_equal ["CVSMTEST_A"], stub_client.inject
    assert_equal "", ENV["CVSMTEST_KEEP"]
  end

  def test_a_nul_value_that_would_not_be_set_is_no_error
    stub_api("CVSMTEST_KEEP" => "x\0y", "CVSMTEST_A" => "a")
    ENV["CVSMTEST_KEEP"] = "local"
    assert_equal ["CVSMTEST_A"], stub_client.inject
    assert_raises(Cvsm::ConfigurationError) { stub_client.inject(overwrite: true) }
    assert_equal "local", ENV["CVSMTEST_KEEP"]
  end
end
