# frozen_string_literal: true

require_relative "test_helper"

# The client shared between threads (the wire rules are the conformance cases').
class ClientTest < CvsmTest
  def test_concurrent_gets_from_many_threads_return_the_right_values
    stub_api(Array.new(10) { |i| ["S#{i}", "v#{i}"] }.to_h)
    client = stub_client
    results = Array.new(10) { |i| Thread.new { client.get("S#{i}") } }.map(&:value)
    assert_equal Array.new(10) { |i| "v#{i}" }, results
  end
end
