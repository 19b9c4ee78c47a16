# frozen_string_literal: true

require_relative "test_helper"

# R14, stale if error: which failures a kept value answers, for how long, how it is marked
# (on_stale) and logged (once per name), and what empties the kept values.
class StaleTest < CvsmTest
  VALUE = "kept-value-s3cr3t"

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
    @stub = stub_api("KEPT" => VALUE, "OTHER" => "other-value")
    @stale_reads = []
    @logger = ListLogger.new
  end

  # A client whose cache is off (every read asks the server) but keeps values 30 s for R14.
  def client(**options)
    stub_client(cache_ttl: 0, stale_if_error: 30, max_retries: 1,
                on_stale: ->(read) { @stale_reads << read }, logger: @logger, **options)
  end

  # The next +count+ requests fail with +fault+ (503 unless given).
  def fail_next(count, **fault)
    @stub.faults({ count: count, **(fault.empty? ? { status: 503 } : fault) })
  end

  def test_a_warning_is_logged_once_per_name_naming_it_and_the_error_never_the_value
    kept = client(max_retries: 0)
    kept.get("KEPT")
    kept.get("OTHER")
    kept.get_all
    fail_next(5)
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
    fail_next(2)
    2.times { kept.get("KEPT") }
    assert_equal 1, @logger.warnings.size
    kept.get("KEPT") # the outage is over
    fail_next(1, drop: true)
    kept.get("KEPT")
    assert_equal 2, @logger.warnings.size
    assert_includes @logger.warnings.last, "Cvsm::NetworkError"
    refute_includes @logger.warnings.last, "HTTP"
  end

  def test_without_a_logger_the_warning_goes_through_kernel_warn
    kept = stub_client(cache_ttl: 0, stale_if_error: 30, max_retries: 0)
    kept.get("KEPT")
    fail_next(1)
    assert_output(nil, /\Acvsm: secret "KEPT" of production answered with the value kept/) do
      assert_equal VALUE, kept.get("KEPT")
    end
    fail_next(1)
    assert_output(nil, "") { kept.get("KEPT") }
  end

  def test_on_stale_can_refuse_the_kept_value_by_raising_the_error
    kept = stub_client(cache_ttl: 0, stale_if_error: 30, max_retries: 0, logger: @logger,
                       on_stale: ->(read) { raise read.error })
    kept.get("KEPT")
    fail_next(1)
    assert_equal 503, assert_raises(Cvsm::ApiError) { kept.get("KEPT") }.status
  end

  def test_a_stale_read_holds_no_value_in_print
    kept = client(max_retries: 0)
    kept.get("KEPT")
    fail_next(1)
    kept.get("KEPT")
    read = @stale_reads.first
    assert read.frozen?
    [read.inspect, read.to_s, read.to_h.to_s, kept.inspect].each { |text| refute_includes text, VALUE }
    assert_includes kept.inspect, "stale_if_error=30"
  end
end
