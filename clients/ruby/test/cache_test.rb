# frozen_string_literal: true

require_relative "test_helper"

# The value cache: hits, expiry, clearing, get_all filling it, and what is never cached.
class CacheTest < CvsmTest
  def test_changing_a_returned_value_does_not_change_the_cache
    stub_api("A" => "1")
    client = stub_client
    all = client.get_all
    all["A"] << "tampered"
    all["NEW"] = "x"
    client.get("A") << "tampered"
    assert_equal({ "A" => "1" }, client.get_all)
    assert_equal "1", client.get("A")
  end

  def test_an_authentication_error_from_the_listing_after_a_404_empties_the_cache_too
    stub = stub_api("A" => "1")
    client = stub_client
    client.get("A")
    stub.faults({ path: StubApi::SECRETS, after: 1, status: 401 }) # the read by name passes, the listing is refused
    assert_raises(Cvsm::AuthenticationError) { client.get("MISSING") }
    assert_equal ["/by-name/MISSING", ""], stub.paths.drop(1).map { |path| path.delete_prefix("/teams/acme/secrets") }
    client.get("A")
    assert_equal 4, stub.requests.size
  end

  def test_cache_inspect_shows_no_keys_or_values
    cache = Cvsm::Cache.new(30)
    cache.write([:secret, "production", "A"], "s3cr3t-value")
    refute_includes cache.inspect, "s3cr3t-value"
    assert_equal "#<Cvsm::Cache ttl=30 stale_if_error=0 entries=1>", cache.inspect
  end

  # R14 on the clock: fresh for ttl, kept ttl + stale_if_error seconds after it was written.
  def test_entries_are_kept_stale_if_error_seconds_past_freshness
    now = 100.0
    cache = Cvsm::Cache.new(30, 60, clock: -> { now })
    cache.write(:k, "v")
    now = 129.9
    assert_equal "v", cache.read(:k)
    assert_equal ["v", 29.9], cache.read_kept(:k).then { |kept| [kept.value, kept.age.round(1)] }
    now = 130.0
    assert_nil cache.read(:k), "no longer fresh"
    assert_equal "v", cache.read_kept(:k).value, "but kept"
    now = 189.9
    assert_equal "v", cache.read_kept(:k).value
    now = 190.0
    assert_nil cache.read_kept(:k)
    assert_equal 0, cache.size, "an entry past the bound is dropped"
  end

  def test_with_ttl_zero_entries_are_never_fresh_but_kept_for_stale_if_error
    now = 0.0
    cache = Cvsm::Cache.new(0, 5, clock: -> { now })
    assert cache.enabled?
    cache.write_many([[:a, "1"], [:b, "2"]])
    assert_nil cache.read(:a)
    now = 4.9
    assert_equal "2", cache.read_kept(:b).value
    now = 5.0
    assert_nil cache.read_kept(:a)
    off = Cvsm::Cache.new(0, 0, clock: -> { now })
    refute off.enabled?
    off.write(:a, "1")
    assert_nil off.read_kept(:a)
    assert_equal 0, off.size
  end

  def test_clear_forgets_kept_values
    now = 0.0
    cache = Cvsm::Cache.new(1, 60, clock: -> { now })
    cache.write(:k, "v")
    now = 2.0
    cache.clear
    assert_nil cache.read_kept(:k)
  end
end
