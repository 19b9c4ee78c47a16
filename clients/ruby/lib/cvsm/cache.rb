# frozen_string_literal: true

# The client's in-memory value cache.
module Cvsm
  # Keeps values under arbitrary keys: fresh for +ttl+ seconds after they were written, then kept +stale_if_error+ seconds longer (R14), for Cvsm::Client to fall back on
  # when a refresh fails. With both at 0 nothing is kept; with a ttl of 0 nothing is ever fresh.
  # It is safe to share between threads. #inspect shows only the settings and the entry count.
  #
  # A live client (R16) also tells the cache what its change stream says: a #snapshot of every
  # name's current version on each (re)connect, and each #change after. A value whose secret
  # changed stops being fresh at once (it is still kept for stale-if-error), and a fetch that
  # began (#mark) before the change stores nothing. Each entry remembers the version it holds when
  # that is known (the read by name says it; a value fetched while the stream is up holds at least
  # the version the stream last announced), so a reconnection's snapshot drops only what changed
  # meanwhile. #clear makes every fetch under way store nothing too.
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
      # @return [String, nil] the secret's name for the value of one name; nil for a result of
      #   several (a Hash of name => value, as get_all keeps it)
      attr_reader :name
      # @return [Integer, nil] the version the value holds (at least), when known
      attr_accessor :version
      # @return [Boolean] false once a change made it stop being fresh (kept for stale-if-error)
      attr_accessor :fresh

      # @param value [Object] the value
      # @param written [Float] when it was written, on the cache's clock
      # @param name [String, nil] the secret's name, or nil for a result of several
      # @param version [Integer, nil] the version it holds, when known
      def initialize(value, written, name = nil, version = nil)
        @value = value
        @written = written
        @name = name
        @version = version
        @fresh = true
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
      @generation = 0 # counts the times the cache was emptied
      @stamp = 0      # counts the changes the stream announced
      @changed = {}   # name => the stamp of its last change
      @latest = nil   # name => version, from the stream; nil before any snapshot
    end

    # When a fetch begins: what #write and #write_many take as +mark:+, so that a fetch under way
    # when the cache is emptied, or (for its name; for a result of several, any name) a change
    # arrives, stores nothing.
    # @return [Array(Integer, Integer)]
    def mark
      @mutex.synchronize { [@generation, @stamp] }
    end

    # Tells whether values are kept at all (ttl or stale_if_error above 0).
    def enabled?
      (@ttl + @stale_if_error).positive?
    end

    # Returns the fresh value under +key+ (younger than ttl), or nil.
    def read(key)
      return nil unless @ttl.positive?

      @mutex.synchronize do
        entry = current(key)
        entry.value if entry&.fresh && @clock.call - entry.written < @ttl
      end
    end

    # Returns a Kept for the value under +key+ while it is younger than
    # ttl + stale_if_error, fresh or not; otherwise nil.
    def read_kept(key)
      @mutex.synchronize do
        entry = current(key)
        Kept.new(entry.value, @clock.call - entry.written) if entry
      end
    end

    # Keeps +value+ under +key+, written now: the value of the secret +name+ (nil: a result of
    # several names, a Hash), of +version+ when the answer said. With a +mark+ (#mark, taken
    # when the fetch began) nothing is stored when the cache was emptied since, or the name
    # changed since and the answer is not known to be at least the announced version.
    def write(key, value, name: nil, version: nil, mark: nil)
      return value unless enabled?

      @mutex.synchronize do
        next if mark && mark[0] != @generation

        announced = name && @latest&.[](name)
        if version && announced
          next if version < announced # older than what the stream already announced
        elsif mark && (name ? @changed.fetch(name, 0) > mark[1] : @stamp > mark[1])
          next # it changed while this was fetched: what was read may be older
        end
        @entries[key] = Entry.new(value, @clock.call, name, version || announced)
      end
      value
    end

    # Keeps every pair of +pairs+, written at the same moment: [key, value, name] for the value
    # of one secret, [key, value] for a result of several. With a +mark+ nothing is stored when
    # the cache was emptied or any change arrived since.
    def write_many(pairs, mark: nil)
      return unless enabled?

      @mutex.synchronize do
        next if mark && (mark[0] != @generation || @stamp > mark[1])

        written = @clock.call
        pairs.each do |key, value, name|
          @entries[key] = Entry.new(value, written, name, name && @latest&.[](name))
        end
      end
    end

    # Takes the change stream's +snapshot+ (+versions+: name => its current version, on each
    # connect). An entry whose version is unknown or differs stops being fresh, and so does a
    # result of several names unless every name of it is still current.
    # @return [Array<String>] the names whose values stopped being fresh
    def snapshot(versions)
      @mutex.synchronize do
        before = @latest
        @latest = versions.dup
        @stamp += 1
        (versions.keys | (before || {}).keys).each do |name|
          @changed[name] = @stamp if before.nil? || before[name] != versions[name]
        end
        dropped = @entries.select do |_, entry|
          entry.fresh && entry.name && !(entry.version && entry.version == versions[entry.name])
        end
        dropped.each { |key, entry| drop(key, entry) }
        names = dropped.map { |_, entry| entry.name }
        @entries.select { |_, entry| entry.fresh && entry.name.nil? }.each do |key, entry|
          held = entry.value.is_a?(Hash) ? entry.value.keys : []
          drop(key, entry) if held.sort != versions.keys.sort || held.intersect?(names)
        end
        names
      end
    end

    # Takes a +change+ event: +name+ is now at +version+ (nil: deleted). Its entry stops being
    # fresh unless it already holds that version; a result of several names always does.
    # @return [Boolean] whether a value of +name+ stopped being fresh
    def change(name, version)
      @mutex.synchronize do
        if @latest
          version.nil? ? @latest.delete(name) : @latest[name] = version
        end
        @stamp += 1
        @entries.select { |_, entry| entry.fresh && entry.name.nil? }.each { |key, entry| drop(key, entry) }
        held = @entries.select { |_, entry| entry.fresh && entry.name == name }
        next false if version && !held.empty? && held.each_value.all? { |entry| entry.version == version }

        @changed[name] = @stamp
        held.each { |key, entry| drop(key, entry) }
        !held.empty?
      end
    end

    # Drops every entry, kept ones included; a fetch under way stores nothing.
    def clear
      @mutex.synchronize do
        @generation += 1
        @entries.clear
      end
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

    # Makes +entry+ (under +key+) stop being fresh: it is still kept for stale-if-error, or
    # forgotten when that is off. Called with the mutex held.
    def drop(key, entry)
      @changed[entry.name] = @stamp if entry.name
      entry.fresh = false
      entry.version = nil
      @entries.delete(key) unless @stale_if_error.positive?
    end

    # The entry under +key+ while it is younger than ttl + stale_if_error; an older one is
    # dropped. Called with the mutex held.
    def current(key)
      entry = @entries[key]
      return nil if entry.nil?
      return entry if @clock.call - entry.written < @ttl + @stale_if_error

      @entries.delete(key)
      nil
    end
  end
end
