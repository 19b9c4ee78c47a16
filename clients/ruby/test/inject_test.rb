# frozen_string_literal: true

require_relative "test_helper"

# inject: keeping or overwriting existing variables (an empty one too) is the conformance case
# inject_sets_the_environment; here a value that could not be set but is not asked to be.
class InjectTest < CvsmTest
  def test_a_nul_value_that_would_not_be_set_is_no_error
    stub_api("CVSMTEST_KEEP" => "x\0y", "CVSMTEST_A" => "a")
    ENV["CVSMTEST_KEEP"] = "local"
    assert_equal ["CVSMTEST_A"], stub_client.inject
    assert_raises(Cvsm::ConfigurationError) { stub_client.inject(overwrite: true) }
    assert_equal "local", ENV["CVSMTEST_KEEP"]
  end
end
