<?php

declare(strict_types=1);

namespace Cvsm\Internal;

/**
 * Decodes the lines of a `text/event-stream` into [event, data] pairs (the part of server-sent
 * events the change stream uses): `event:` names the event ("message" when none does), each
 * `data:` line adds a line of data, a blank line ends the event (one without data is none),
 * comments (`:`) are skipped and `id:` is remembered in $lastId, for `Last-Event-ID`.
 *
 * @internal
 */
final class SseDecoder
{
    /** The last `id:` seen, for the `Last-Event-ID` of a reconnection; null while none was. */
    public ?string $lastId = null;

    private string $event = '';

    /** @var list<string> */
    private array $data = [];

    /**
     * Takes one line (without its line ending) and returns [event, data] when a blank line ends
     * an event that has data, else null.
     *
     * @return array{0: string, 1: string}|null
     */
    public function line(string $line): ?array
    {
        if ($line === '') {
            [$event, $data] = [$this->event !== '' ? $this->event : 'message', $this->data];
            $this->event = '';
            $this->data = [];

            return $data !== [] ? [$event, implode("\n", $data)] : null;
        }
        if ($line[0] === ':') {
            return null;
        }
        $colon = strpos($line, ':');
        [$field, $value] = $colon === false ? [$line, ''] : [substr($line, 0, $colon), substr($line, $colon + 1)];
        if (str_starts_with($value, ' ')) {
            $value = substr($value, 1);
        }
        if ($field === 'event') {
            $this->event = $value;
        } elseif ($field === 'data') {
            $this->data[] = $value;
        } elseif ($field === 'id' && !str_contains($value, "\0")) {
            $this->lastId = $value;
        }

        return null;
    }
}
