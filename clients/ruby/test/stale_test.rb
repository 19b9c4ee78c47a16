# frozen_string_literal: true

require_relative "test_helper"

# R14, stale if error: which failures a kept value answers, for how long, how it is marked
# (on_stale) and logged (once per name), and what empties the kept values.
class StaleTest < CvsmTest
  VALUE = "kept-value-s3cr3t"
  ANY = /./.freeze

  # Collects what the client logs, as a Logger would receive it.
  class ListLogger
    attr_reader :warnings

    def initialize
      @warnings = []
    end

    def warn(message)
      @warnings << message
    end
  end

  def setup
    super
    @api, @server = start_api
    @api.add_secret("KEPT", VALUE)
    @api.add_secret("OTHER", "other-value")
    @stale_reads = []
    @logger = ListLogger.new
  end

  # A client whose cache is off (every read asks the server) but keeps values 30 s for R14.
  def client(**options)
    client_for(@server, cache_ttl: 0, stale_if_error: 30, max_retries: 1,
                        on_stale: ->(read) { @stale_reads << read }, logger: @logger, **options)
  end

  def fail_next(count, response)
    @api.script(ANY, *Array.new(count) { response })
  end

  def unavailable = json(503, "error" => "sibuk")

  def test_off_by_default_a_failed_refresh_is_the_error
    plain = client_for(@server, cache_ttl: 0, max_retries: 0)
    assert_equal 0, plain.stale_if_error
    plain.get("KEPT")
    fail_next(1, unavailable)
    assert_equal 503, assert_raises(Cvsm::ApiError) { plain.get("KEPT") }.status
  end

  def test_each_failure_r14_allows_is_answered_with_the_kept_value_after_the_retries
    {
      "dropped connection" => [:drop, Cvsm::NetworkError, 2],
      "503" => [unavailable, Cvsm::ApiError, 2],
      "502" => [[502, {}, ""], Cvsm::ApiError, 2],
      "504" => [json(504, {}), Cvsm::ApiError, 2],
      "500" => [json(500, "error" => "gagal"), Cvsm::ApiError, 1],
      "429" => [json(429, { "error" => "pelan" }, "Retry-After" => "1"), Cvsm::RateLimitError, 1],
      "unreadable 200" => [[200, { "Content-Type" => "text/html" }, "<html>maintenance</html>"], Cvsm::NetworkError, 2],
      "200 without a value" => [json(200, "secret" => {}), Cvsm::NetworkError, 2]
    }.each do |label, (response, error_class, attempts)|
      kept = client
      assert_equal VALUE, kept.get("KEPT")
      before = @server.log.size
      fail_next(attempts, response)
      @stale_reads.clear
      assert_equal VALUE, kept.get("KEPT"), label
      assert_equal attempts, @server.log.size - before, "#{label}: the retries come first"
      assert_equal 1, @stale_reads.size, label
      read = @stale_reads.first
      assert_equal "KEPT", read.name
      assert_instance_of error_class, read.error, label
      assert_operator read.age, :>=, 0
      assert_operator read.age, :<, 5
    end
  end

  def test_get_all_is_answered_with_its_kept_result
    kept = client
    assert_equal({ "KEPT" => VALUE, "OTHER" => "other-value" }, kept.get_all)
    fail_next(2, :drop)
    all = kept.get_all
    assert_equal({ "KEPT" => VALUE, "OTHER" => "other-value" }, all)
    assert_nil @stale_reads.last.name, "get_all's stale read has no name"
    all["KEPT"] << "tampered"
    all["NEW"] = "x"
    fail_next(2, :drop)
    assert_equal({ "KEPT" => VALUE, "OTHER" => "other-value" }, kept.get_all, "a copy was returned")
  end

  def test_get_all_keeps_every_value_for_get_too
    kept = client
    kept.get_all
    fail_next(2, unavailable)
    value = kept.get("OTHER")
    assert_equal "other-value", value
    value << "tampered"
    fail_next(2, unavailable)
    assert_equal "other-value", kept.get("OTHER"), "a copy was returned"
    assert_equal %w[OTHER OTHER], @stale_reads.map(&:name)
  end

  def test_nothing_kept_means_the_error
    kept = client
    fail_next(2, unavailable)
    assert_raises(Cvsm::ApiError) { kept.get("KEPT") }
    assert_empty @stale_reads
  end

  def test_a_fresh_read_is_not_marked_and_a_cached_one_is_not_either
    kept = client_for(@server, stale_if_error: 30, on_stale: ->(read) { @stale_reads << read }, logger: @logger)
    kept.get("KEPT")
    kept.get("KEPT")
    kept.get_all
    assert_empty @stale_reads
    assert_empty @logger.warnings
    assert_equal 2, @server.log.size
  end

  def test_with_a_cache_ttl_a_value_is_served_stale_once_it_is_no_longer_fresh
    kept = client(cache_ttl: 1)
    kept.get("KEPT")
    fail_next(2, unavailable)
    assert_equal VALUE, kept.get("KEPT")
    assert_equal 1, @server.log.size, "fresh: no request, not stale"
    assert_empty @stale_reads
    sleep 1.05
    assert_equal VALUE, kept.get("KEPT")
    assert_equal 3, @server.log.size, "the refresh was tried, with its retry"
    assert_equal 1, @stale_reads.size
    assert_operator @stale_reads.first.age, :>=, 1
  end

  def test_a_kept_value_older_than_cache_ttl_plus_stale_if_error_is_not_served
    kept = client(stale_if_error: 1, max_retries: 0)
    kept.get("KEPT")
    sleep 1.05
    fail_next(1, unavailable)
    assert_equal 503, assert_raises(Cvsm::ApiError) { kept.get("KEPT") }.status
    assert_empty @stale_reads
  end

  def test_authentication_and_permission_errors_never_serve_kept_values_and_empty_the_cache
    [[json(401, "error" => "token tidak valid"), Cvsm::AuthenticationError],
     [json(403, "error" => "dilarang"), Cvsm::PermissionDeniedError]].each do |response, error_class|
      kept = client
      kept.get("KEPT")
      kept.get_all
      fail_next(1, response)
      assert_raises(error_class) { kept.get("KEPT") }
      fail_next(2, unavailable)
      assert_raises(Cvsm::ApiError) { kept.get("KEPT") }
      fail_next(2, unavailable)
      assert_raises(Cvsm::ApiError, "the kept get_all went too") { kept.get_all }
      assert_empty @stale_reads
    end
  end

  def test_other_errors_never_serve_kept_values
    {
      "404 to the read, then a listing" => [[json(404, "error" => "tidak ditemukan")], Cvsm::SecretNotFoundError],
      "400" => [[json(400, "error" => "environment tidak valid")], Cvsm::ConfigurationError],
      "404 to the read and the listing" => [Array.new(2) { json(404, "error" => "tidak ditemukan") },
                                            Cvsm::ConfigurationError],
      "404 to the read, then the listing fails" => [[json(404, "error" => "tidak ditemukan"), *Array.new(2) { unavailable }],
                                                    Cvsm::ApiError],
      "409" => [[json(409, "error" => "konflik")], Cvsm::ApiError],
      "302" => [[[302, { "Location" => "http://127.0.0.1:1/" }, ""]], Cvsm::ApiError]
    }.each do |label, (responses, error_class)|
      kept = client
      kept.get("KEPT")
      @api.script(ANY, *responses)
      assert_raises(error_class, label) { kept.get("KEPT") }
      assert_empty @stale_reads, label
      assert_equal VALUE, kept.get("KEPT"), "#{label}: nothing was emptied"
    end
  end

  def test_clear_cache_forgets_kept_values
    kept = client
    kept.get("KEPT")
    kept.get_all
    kept.clear_cache
    fail_next(2, unavailable)
    assert_raises(Cvsm::ApiError) { kept.get("KEPT") }
    fail_next(2, unavailable)
    assert_raises(Cvsm::ApiError) { kept.get_all }
  end

  def test_a_warning_is_logged_once_per_name_naming_it_and_the_error_never_the_value
    kept = client(max_retries: 0)
    kept.get("KEPT")
    kept.get("OTHER")
    kept.get_all
    fail_next(5, unavailable)
    3.times { kept.get("KEPT") }
    kept.get("OTHER")
    kept.get_all
    assert_equal 5, @stale_reads.size, "on_stale hears of every stale read"
    assert_equal 3, @logger.warnings.size, @logger.warnings.inspect
    first, other, all = @logger.warnings
    assert_match(/\Acvsm: secret "KEPT" of production answered with the value kept from \d+s ago/, first)
    assert_includes first, "Cvsm::ApiError (HTTP 503)"
    assert_includes other, 'secret "OTHER"'
    assert_match(/\Acvsm: get_all of production /, all)
    @logger.warnings.each do |message|
      refute_includes message, VALUE
      refute_includes message, "other-value"
      refute_includes message, TOKEN
    end
  end

  def test_after_a_successful_refresh_the_next_stale_read_is_logged_again
    kept = client(max_retries: 0)
    kept.get("KEPT")
    fail_next(2, unavailable)
    2.times { kept.get("KEPT") }
    assert_equal 1, @logger.warnings.size
    kept.get("KEPT") # the outage is over
    fail_next(1, :drop)
    kept.get("KEPT")
    assert_equal 2, @logger.warnings.size
    assert_includes @logger.warnings.last, "Cvsm::NetworkError"
    refute_includes @logger.warnings.last, "HTTP"
  end

  def test_without_a_logger_the_warning_goes_through_kernel_warn
    kept = client_for(@server, cache_ttl: 0, stale_if_error: 30, max_retries: 0)
    kept.get("KEPT")
    fail_next(1, unavailable)
    assert_output(nil, /\Acvsm: secret "KEPT" of production answered with the value kept/) do
      assert_equal VALUE, kept.get("KEPT")
    end
    fail_next(1, unavailable)
    assert_output(nil, "") { kept.get("KEPT") }
  end

  def test_on_stale_can_refuse_the_kept_value_by_raising_the_error
    kept = client_for(@server, cache_ttl: 0, stale_if_error: 30, max_retries: 0, logger: @logger,
                               on_stale: ->(read) { raise read.error })
    kept.get("KEPT")
    fail_next(1, unavailable)
    assert_equal 503, assert_raises(Cvsm::ApiError) { kept.get("KEPT") }.status
  end

  def test_a_stale_read_holds_no_value_in_print
    kept = client(max_retries: 0)
    kept.get("KEPT")
    fail_next(1, unavailable)
    kept.get("KEPT")
    read = @stale_reads.first
    assert read.frozen?
    [read.inspect, read.to_s, read.to_h.to_s, kept.inspect].each { |text| refute_includes text, VALUE }
    assert_includes kept.inspect, "stale_if_error=30"
  end
end
