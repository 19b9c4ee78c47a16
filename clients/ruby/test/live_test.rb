# frozen_string_literal: true

require_relative "test_helper"
require "logger"
require "stringio"

# Live caches (R16) where the conformance cases do not look: the option and CVSM_LIVE, the
# event-stream parser, the reconnection pauses, Last-Event-ID, and close ending the stream (on
# conformance/stub.py's change stream).
class LiveTest < CvsmTest
  def teardown
    @client&.close
    super
  end

  def eventually
    deadline = Time.now + 5
    sleep 0.01 until yield || Time.now > deadline
    assert yield
  end

  # CVSM_LIVE's words are the conformance cases live_variable_spellings and
  # live_variable_turns_the_stream_on_and_off; here the option's own type and precedence.
  def test_live_option
    refute stub_client.live?
    assert_raises(Cvsm::ConfigurationError) { stub_client(live: "yes") }
    ENV["CVSM_LIVE"] = "1"
    assert_equal false, stub_client(live: false).live?
  end

  def test_decoder_reads_events_comments_ids_and_every_line_ending
    decoder = Cvsm::Live::Decoder.new
    lines = Cvsm::Live::Lines.new
    events = []
    ["event: change\r", "\ndata: {\"a\":", "\r\ndata:1}\rid: 7\n: heartbeat\n\n", "data: x\n", "\n"].each do |chunk|
      lines.feed(chunk) { |line| (event = decoder.line(line)) && events << event }
    end
    assert_equal [["change", "{\"a\":\n1}"], %w[message x]], events
    assert_equal "7", decoder.last_id
    assert_nil decoder.line("id: a\0b")
    assert_equal "7", decoder.last_id # an id holding NUL is ignored
  end

  def test_reconnect_pauses_stay_within_half_and_all_of_the_bound
    low = Struct.new(:rand).new(0.0)
    high = Struct.new(:rand).new(0.999999)
    (0..12).each do |attempt|
      bound = [30.0, 0.5 * (2**attempt)].min
      assert_in_delta bound / 2, Cvsm::Live.reconnect_delay(attempt, low), 1e-9
      assert_in_delta bound, Cvsm::Live.reconnect_delay(attempt, high), 1e-4
    end
  end

  def test_refusals_wait_long_enough_and_401_403_forget
    forgotten = 0
    state = Cvsm::Live::State.new(Cvsm::Cache.new(30), -> { forgotten += 1 }, ->(_) {}, "team acme")
    assert_operator state.refused(Cvsm::Live::Refused.new(503)), :<=, 1.0
    assert_operator state.refused(Cvsm::Live::Refused.new(429, 40)), :>=, 40
    assert_equal 0, forgotten
    assert_operator state.refused(Cvsm::Live::Refused.new(404)), :>=, 300
    assert_equal 0, forgotten
    [401, 403].each { |status| assert_operator state.refused(Cvsm::Live::Refused.new(status)), :>=, 300 }
    assert_equal 2, forgotten
    assert_raises(Cvsm::Live::Ended) { state.event("end", '{"status": 403}') }
    assert_equal 3, forgotten
  end

  def test_one_stream_drops_a_changed_value_and_close_ends_it
    stub = stub_api("A" => "one")
    log = StringIO.new
    client = @client = stub_client(live: true, logger: Logger.new(log))
    assert_equal "one", client.get("A")
    eventually { client.live_connected? }
    streams = -> { stub.requests.select { |r| r["path"].end_with?("/secrets/changes") } }
    headers = streams.call.first["headers"]
    assert_equal ["environment=production", "text/event-stream", "Bearer #{TOKEN}", nil],
                 [streams.call.first["query"], headers["accept"], headers["authorization"], headers["last-event-id"]]
    assert_equal "one", client.get("A") # the version held is the snapshot's: still cached
    stub.changes({ name: "A", value: "two", id: "42" })
    eventually { client.get("A") == "two" }
    assert_equal 2, stub.paths.count("/teams/acme/secrets/by-name/A"), "one read for the change; nothing polls"

    stub.changes({ close: true }) # dropped: the client connects again, naming the last event
    eventually { streams.call.size == 2 }
    assert_equal "42", streams.call.last["headers"]["last-event-id"]
    refute_includes log.string, TOKEN
    assert_includes log.string, "the change stream is down"
    shown = client.instance_variables.map { |name| client.instance_variable_get(name).inspect }.join
    refute_includes shown, TOKEN
    refute_includes shown, "two"

    stream = client.instance_variable_get(:@stream)
    eventually { stub.streams["open"] == 1 }
    assert_predicate stream, :alive?
    assert_nil client.close
    eventually { stub.streams["open"].zero? } # the stub saw the connection closed
    refute_predicate stream, :alive?
    assert_nil client.close # idempotent
    before = stub.requests.size
    assert_equal "two", client.get("A") # reads still work, from the cache, and open nothing
    assert_equal before, stub.requests.size
  end

  def test_cache_takes_snapshots_and_changes
    cache = Cvsm::Cache.new(30, 60)
    key = ->(name) { [:secret, "production", name] }
    cache.write(key["A"], "a1", name: "A", version: 1)
    cache.write(key["B"], "b?", name: "B") # version unknown
    cache.write_many([[key["C"], "c1", "C"], [[:all, "production"], { "C" => "c1" }]])
    assert_equal ["B", "C"], cache.snapshot({ "A" => 1, "B" => 4, "C" => 1 }).sort
    assert_equal "a1", cache.read(key["A"])
    assert_nil cache.read(key["B"])
    assert_equal "b?", cache.read_kept(key["B"]).value # dropped, still kept for stale-if-error
    refute cache.change("A", 1) # it already holds that version
    mark = cache.mark
    assert cache.change("A", 2)
    assert_nil cache.read(key["A"])
    cache.write(key["A"], "a?", name: "A", mark: mark) # began before the change, version unknown
    assert_nil cache.read(key["A"])
    cache.write(key["A"], "a2", name: "A", version: 2, mark: mark) # says it is the announced one
    assert_equal "a2", cache.read(key["A"])
    cache.write_many([[[:all, "production"], {}]], mark: mark) # a change arrived since the mark
    assert_nil cache.read([:all, "production"])
    mark = cache.mark
    cache.clear
    cache.write(key["A"], "a2", name: "A", version: 2, mark: mark) # began before the cache was emptied
    assert_nil cache.read_kept(key["A"])
  end

  def test_refresh_refuses_an_environment_that_is_not_a_name
    stub = stub_api
    ["", :staging, 1].each do |environment|
      assert_raises(Cvsm::ConfigurationError) { stub_client.refresh("A", environment: environment) }
    end
    assert_empty stub.requests
  end
end
