# frozen_string_literal: true

# The client's in-memory value cache.
module Cvsm
  # Cvsm::Cache keeps values for +ttl+ seconds under arbitrary keys; a ttl of 0 disables it.
  # It is safe to share between threads. #inspect shows only the ttl and the entry count.
  class Cache
    # One cached value and its expiry time. It prints, dumps to YAML or JSON and marshals as
    # nothing but a placeholder, so dumping the cache's entries shows no value.
    class Entry
      attr_reader :value, :expires

      def initialize(value, expires)
        @value = value
        @expires = expires
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

    attr_reader :ttl

    def initialize(ttl, clock: -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) })
      @ttl = ttl
      @clock = clock
      @entries = {}
      @mutex = Mutex.new
    end

    # Cvsm::Cache#enabled? tells whether values are kept at all (ttl above 0).
    def enabled?
      @ttl.positive?
    end

    # Cvsm::Cache#read returns the live value under +key+, or nil when it is absent or expired.
    def read(key)
      return nil unless enabled?

      @mutex.synchronize do
        entry = @entries[key]
        return nil if entry.nil?

        if @clock.call >= entry.expires
          @entries.delete(key)
          return nil
        end
        entry.value
      end
    end

    # Cvsm::Cache#write keeps +value+ under +key+ for ttl seconds from now.
    def write(key, value)
      return value unless enabled?

      @mutex.synchronize { @entries[key] = Entry.new(value, @clock.call + @ttl) }
      value
    end

    # Cvsm::Cache#write_many keeps every key/value pair of +pairs+ with one expiry.
    def write_many(pairs)
      return unless enabled?

      @mutex.synchronize do
        expires = @clock.call + @ttl
        pairs.each { |key, value| @entries[key] = Entry.new(value, expires) }
      end
    end

    # Cvsm::Cache#clear drops every entry.
    def clear
      @mutex.synchronize { @entries.clear }
      nil
    end

    # Cvsm::Cache#size is the number of entries held, live or not yet purged.
    def size
      @mutex.synchronize { @entries.size }
    end

    # Cvsm::Cache#inspect shows the ttl and entry count, never keys or values.
    def inspect
      "#<#{self.class.name} ttl=#{@ttl} entries=#{size}>"
    end
    alias to_s inspect

    def pretty_print(printer) = printer.text(inspect)

    # Cvsm::Cache#encode_with makes to_yaml write the ttl only, never keys or values.
    def encode_with(coder)
      coder["ttl"] = @ttl
    end

    # A cache cannot be marshalled: it holds secret values.
    def marshal_dump
      raise TypeError, "#{self.class.name} cannot be marshalled (it holds secret values)"
    end
  end
end
