# frozen_string_literal: true

# The client's in-memory value cache.
module Cvsm
  # Keeps values under arbitrary keys: fresh for +ttl+ seconds after they were written, then kept +stale_if_error+ seconds longer (R14), for Cvsm::Client to fall back on
  # when a refresh fails. With both at 0 nothing is kept; with a ttl of 0 nothing is ever fresh.
  # It is safe to share between threads. #inspect shows only the settings and the entry count.
  # @api private
  class Cache
    # One cached value and when it was written. It prints, dumps to YAML or JSON and marshals as
    # nothing but a placeholder, so dumping the cache's entries shows no value.
    class Entry
      include Redaction::Placeholder

      # @return [Object] the cached value
      attr_reader :value
      # @return [Float] when it was written, on the cache's clock
      attr_reader :written

      # @param value [Object] the value
      # @param written [Float] when it was written, on the cache's clock
      def initialize(value, written)
        @value = value
        @written = written
      end

      private

      def redacted_text = "#<cached value>"
      def marshal_refusal = "a cached value cannot be marshalled"
    end
    private_constant :Entry

    # a value past its freshness that #read_kept still has: the value and
    # its age in seconds (since it was written).
    Kept = Struct.new(:value, :age) do
      # @return [String] the age, never the value
      def inspect = "#<#{self.class.name} age=#{age.round(3)}>"
      alias_method :to_s, :inspect
      # Makes +pp+ print the same text as #inspect.
      # @param printer [PP] the pretty printer
      # @return [void]
      def pretty_print(printer) = printer.text(inspect)
    end
    private_constant :Kept

    include Redaction::Settings

    # @return [Integer] seconds a value is fresh after it was written
    attr_reader :ttl
    # @return [Integer] seconds a value is kept past +ttl+ for stale-if-error
    attr_reader :stale_if_error

    # @param ttl [Integer] seconds a value is fresh after it was written
    # @param stale_if_error [Integer] seconds it is kept after that
    # @param clock [#call] returns the time in seconds (monotonic by default)
    def initialize(ttl, stale_if_error = 0, clock: -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) })
      @ttl = ttl
      @stale_if_error = stale_if_error
      @clock = clock
      @entries = {}
      @mutex = Mutex.new
    end

    # Tells whether values are kept at all (ttl or stale_if_error above 0).
    def enabled?
      (@ttl + @stale_if_error).positive?
    end

    # Returns the fresh value under +key+ (younger than ttl), or nil.
    def read(key)
      return nil unless @ttl.positive?

      @mutex.synchronize do
        entry = live(key)
        entry.value if entry && @clock.call - entry.written < @ttl
      end
    end

    # Returns a Kept for the value under +key+ while it is younger than
    # ttl + stale_if_error, fresh or not; otherwise nil.
    def read_kept(key)
      @mutex.synchronize do
        entry = live(key)
        Kept.new(entry.value, @clock.call - entry.written) if entry
      end
    end

    # Keeps +value+ under +key+, written now.
    def write(key, value)
      write_many([[key, value]])
      value
    end

    # Keeps every key/value pair of +pairs+, written at the same moment.
    def write_many(pairs)
      return unless enabled?

      @mutex.synchronize do
        written = @clock.call
        pairs.each { |key, value| @entries[key] = Entry.new(value, written) }
      end
    end

    # Drops every entry, kept ones included.
    def clear
      @mutex.synchronize { @entries.clear }
      nil
    end

    # the number of entries held, live or not yet purged.
    def size
      @mutex.synchronize { @entries.size }
    end

    # Shows the settings and the entry count, never keys or values; YAML and JSON show the
    # settings only.
    # @return [String]
    def inspect
      "#<#{self.class.name} ttl=#{@ttl} stale_if_error=#{@stale_if_error} entries=#{size}>"
    end

    private

    def shown_settings = { ttl: @ttl, stale_if_error: @stale_if_error }
    def marshal_refusal = "#{self.class.name} cannot be marshalled (it holds secret values)"

    # The entry under +key+ while it is younger than ttl + stale_if_error; an older one is
    # dropped. Called with the mutex held.
    def live(key)
      entry = @entries[key]
      return nil if entry.nil?
      return entry if @clock.call - entry.written < @ttl + @stale_if_error

      @entries.delete(key)
      nil
    end
  end
end
