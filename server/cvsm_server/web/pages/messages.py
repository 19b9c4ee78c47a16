"""The flash messages a page may say after a change (`kit.flash`, `kit.done`)."""

from __future__ import annotations

from ...core.i18n import N_  # translated where it is shown (`session.read_flash`)


# What a page says after a change: these texts only (a flash names one of them, so it never
# carries a value or anything typed). `ok` is said with role="status", `error` with role="alert".
FLASHES: dict[str, tuple[str, str]] = {
    "signed_up": ("ok", N_("Akun dibuat. Kami sudah mengirim email verifikasi ke alamat Anda: "
                           "buka tautannya dalam 48 jam.")),
    "signed_out": ("ok", N_("Anda sudah keluar dari semua perangkat.")),
    "password_reset": ("ok", N_("Kata sandi sudah diganti dan semua sesi lama sudah keluar. Masuk "
                                "dengan kata sandi baru.")),
    "team_created": ("ok", N_("Tim dibuat.")),
    "secret_created": ("ok", N_("Secret disimpan.")),
    "secret_updated": ("ok", N_("Perubahan secret disimpan.")),
    "secret_deleted": ("ok", N_("Secret dihapus.")),
    "secret_rolled_back": ("ok", N_("Secret dikembalikan ke versi yang dipilih.")),
    "secrets_imported": ("ok", N_("Impor .env selesai.")),
    "share_created": ("ok", N_("Tautan berbagi dibuat.")),
    "share_revoked": ("ok", N_("Tautan berbagi dicabut.")),
    "rotation_started": ("ok", N_("Rotasi dijalankan.")),
    "member_added": ("ok", N_("Anggota ditambahkan.")),
    "member_changed": ("ok", N_("Peran anggota diubah.")),
    "member_removed": ("ok", N_("Anggota dikeluarkan dari tim.")),
    "invite_sent": ("ok", N_("Undangan dikirim.")),
    "invite_revoked": ("ok", N_("Undangan dicabut.")),
    "invite_accepted": ("ok", N_("Undangan diterima: Anda sekarang anggota tim ini.")),
    "token_created": ("ok", N_("Token dibuat.")),
    "token_revoked": ("ok", N_("Token dicabut.")),
    "verification_sent": ("ok", N_("Tautan verifikasi sudah dikirim ke email Anda "
                                   "(berlaku 48 jam).")),
    "totp_enabled": ("ok", N_("Verifikasi dua langkah aktif.")),
    "deletion_requested": ("ok", N_("Penghapusan akun dijadwalkan 7 hari lagi.")),
    "deletion_cancelled": ("ok", N_("Penghapusan akun dibatalkan.")),
    "user_changed": ("ok", N_("Pengguna diperbarui.")),
    "support_escalated": ("ok", N_("Permintaan Anda sudah diteruskan ke admin. Balasan akan "
                                   "dikirim "
                                   "ke email Anda dan muncul di percakapan ini.")),
    "became_admin": ("ok", N_("Akun Anda sekarang admin server ini.")),
    "plan_saved": ("ok", N_("Paket tim disimpan.")),
    "reply_sent": ("ok", N_("Balasan terkirim ke email pengguna.")),
    "ticket_closed": ("ok", N_("Tiket ditutup.")),
    "e2e_key_set": ("ok", N_("Kunci end-to-end disiapkan dan terbuka di peramban ini. Simpan kunci "
                             "pemulihan di bawah sekarang: kunci itu tidak ditampilkan lagi.")),
    "e2e_key_saved": ("ok", N_("Passphrase baru disimpan; kunci end-to-end terbuka di "
                               "peramban ini.")),
    "e2e_granted": ("ok", N_("Akses ke kunci tim diberikan.")),
    "language_saved": ("ok", N_("Bahasa disimpan.")),
    "e2e_rekeyed": ("ok", N_("Kunci tim diganti: nilai sekarang disegel dengan kunci baru.")),
    "new_team_plan_saved": ("ok", N_("Paket untuk tim baru disimpan.")),
    "rotation_policy_saved": ("ok", N_("Kebijakan rotasi disimpan.")),
    "rotation_policy_deleted": ("ok", N_("Kebijakan rotasi dihapus; riwayatnya tetap ada.")),
    "webhook_created": ("ok", N_("Webhook dibuat.")),
    "webhook_deleted": ("ok", N_("Webhook dihapus.")),
    "webhook_test_sent": ("ok", N_("Event uji (ping) diantrekan; hasilnya muncul di pengiriman "
                                   "terbaru.")),
    "device_approved": ("ok", N_("Disetujui: kembali ke terminal, cvsm login selesai sendiri.")),
    "device_denied": ("ok", N_("Permintaan masuk ditolak: terminal itu tidak mendapat token.")),
}
