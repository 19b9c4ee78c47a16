# frozen_string_literal: true

# The client's in-memory value cache.
module Cvsm
  # Cvsm::Cache keeps values under arbitrary keys: fresh for +ttl+ seconds after they were
  # written, then kept +stale_if_error+ seconds longer (R14), for Cvsm::Client to fall back on
  # when a refresh fails. With both at 0 nothing is kept; with a ttl of 0 nothing is ever fresh.
  # It is safe to share between threads. #inspect shows only the settings and the entry count.
  class Cache
    # One cached value and when it was written. It prints, dumps to YAML or JSON and marshals as
    # nothing but a placeholder, so dumping the cache's entries shows no value.
    class Entry
      attr_reader :value, :written

      def initialize(value, written)
        @value = value
        @written = written
      end

      def inspect = "#<cached value>"
      alias to_s inspect
      def pretty_print(printer) = printer.text(inspect)
      def encode_with(coder) = coder.scalar = inspect
      def as_json(*) = inspect
      def to_json(*args) = inspect.to_json(*args)

      def marshal_dump
        raise TypeError, "a cached value cannot be marshalled"
      end
    end
    private_constant :Entry

    # Cvsm::Cache::Kept is a value past its freshness that #read_kept still has: the value and
    # its age in seconds (since it was written).
    Kept = Struct.new(:value, :age) do
      def inspect = "#<#{self.class.name} age=#{age.round(3)}>"
      alias_method :to_s, :inspect
      def pretty_print(printer) = printer.text(inspect)
    end
    private_constant :Kept

    attr_reader :ttl, :stale_if_error

    def initialize(ttl, stale_if_error = 0, clock: -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) })
      @ttl = ttl
      @stale_if_error = stale_if_error
      @clock = clock
      @entries = {}
      @mutex = Mutex.new
    end

    # Cvsm::Cache#enabled? tells whether values are kept at all (ttl or stale_if_error above 0).
    def enabled?
      (@ttl + @stale_if_error).positive?
    end

    # Cvsm::Cache#read returns the fresh value under +key+ (younger than ttl), or nil.
    def read(key)
      return nil unless @ttl.positive?

      @mutex.synchronize do
        entry = live(key)
        entry.value if entry && @clock.call - entry.written < @ttl
      end
    end

    # Cvsm::Cache#read_kept returns a Kept for the value under +key+ while it is younger than
    # ttl + stale_if_error, fresh or not; otherwise nil.
    def read_kept(key)
      @mutex.synchronize do
        entry = live(key)
        Kept.new(entry.value, @clock.call - entry.written) if entry
      end
    end

    # Cvsm::Cache#write keeps +value+ under +key+, written now.
    def write(key, value)
      write_many([[key, value]])
      value
    end

    # Cvsm::Cache#write_many keeps every key/value pair of +pairs+, written at the same moment.
    def write_many(pairs)
      return unless enabled?

      @mutex.synchronize do
        written = @clock.call
        pairs.each { |key, value| @entries[key] = Entry.new(value, written) }
      end
    end

    # Cvsm::Cache#clear drops every entry, kept ones included.
    def clear
      @mutex.synchronize { @entries.clear }
      nil
    end

    # Cvsm::Cache#size is the number of entries held, live or not yet purged.
    def size
      @mutex.synchronize { @entries.size }
    end

    # Cvsm::Cache#inspect shows the settings and entry count, never keys or values.
    def inspect
      "#<#{self.class.name} ttl=#{@ttl} stale_if_error=#{@stale_if_error} entries=#{size}>"
    end
    alias to_s inspect

    def pretty_print(printer) = printer.text(inspect)

    # Cvsm::Cache#encode_with makes to_yaml write the settings only, never keys or values.
    def encode_with(coder)
      coder["ttl"] = @ttl
      coder["stale_if_error"] = @stale_if_error
    end

    # A cache cannot be marshalled: it holds secret values.
    def marshal_dump
      raise TypeError, "#{self.class.name} cannot be marshalled (it holds secret values)"
    end

    private

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
