"""The flash messages a page may say after a change (`kit.flash`, `kit.done`)."""

from __future__ import annotations

# What a page says after a change: these texts only (a flash names one of them, so it never
# carries a value or anything typed). `ok` is said with role="status", `error` with role="alert".
FLASHES: dict[str, tuple[str, str]] = {
    "signed_up": ("ok", "Akun dibuat. Kami sudah mengirim email verifikasi ke alamat Anda: "
                        "buka tautannya dalam 48 jam."),
    "signed_out": ("ok", "Anda sudah keluar dari semua perangkat."),
    "password_reset": ("ok", "Kata sandi sudah diganti dan semua sesi lama sudah keluar. Masuk "
                             "dengan kata sandi baru."),
    "team_created": ("ok", "Tim dibuat."),
    "secret_created": ("ok", "Secret disimpan."),
    "secret_updated": ("ok", "Perubahan secret disimpan."),
    "secret_deleted": ("ok", "Secret dihapus."),
    "secret_rolled_back": ("ok", "Secret dikembalikan ke versi yang dipilih."),
    "secrets_imported": ("ok", "Impor .env selesai."),
    "share_created": ("ok", "Tautan berbagi dibuat."),
    "share_revoked": ("ok", "Tautan berbagi dicabut."),
    "rotation_started": ("ok", "Rotasi dijalankan."),
    "member_added": ("ok", "Anggota ditambahkan."),
    "member_changed": ("ok", "Peran anggota diubah."),
    "member_removed": ("ok", "Anggota dikeluarkan dari tim."),
    "invite_sent": ("ok", "Undangan dikirim."),
    "invite_revoked": ("ok", "Undangan dicabut."),
    "invite_accepted": ("ok", "Undangan diterima: Anda sekarang anggota tim ini."),
    "token_created": ("ok", "Token dibuat."),
    "token_revoked": ("ok", "Token dicabut."),
    "verification_sent": ("ok", "Tautan verifikasi sudah dikirim ke email Anda (berlaku 48 jam)."),
    "totp_enabled": ("ok", "Verifikasi dua langkah aktif."),
    "deletion_requested": ("ok", "Penghapusan akun dijadwalkan 7 hari lagi."),
    "deletion_cancelled": ("ok", "Penghapusan akun dibatalkan."),
    "user_changed": ("ok", "Pengguna diperbarui."),
    "support_escalated": ("ok", "Permintaan Anda sudah diteruskan ke admin. Balasan akan dikirim "
                                "ke email Anda dan muncul di percakapan ini."),
    "became_admin": ("ok", "Akun Anda sekarang admin server ini."),
    "plan_saved": ("ok", "Paket tim disimpan."),
    "reply_sent": ("ok", "Balasan terkirim ke email pengguna."),
    "ticket_closed": ("ok", "Tiket ditutup."),
    "e2e_key_set": ("ok", "Kunci end-to-end disiapkan dan terbuka di peramban ini. Simpan kunci "
                          "pemulihan di bawah sekarang: kunci itu tidak ditampilkan lagi."),
    "e2e_key_saved": ("ok", "Passphrase baru disimpan; kunci end-to-end terbuka di peramban ini."),
    "e2e_granted": ("ok", "Akses ke kunci tim diberikan."),
    "e2e_rekeyed": ("ok", "Kunci tim diganti: nilai sekarang disegel dengan kunci baru."),
    "rotation_policy_saved": ("ok", "Kebijakan rotasi disimpan."),
    "rotation_policy_deleted": ("ok", "Kebijakan rotasi dihapus; riwayatnya tetap ada."),
    "webhook_created": ("ok", "Webhook dibuat."),
    "webhook_deleted": ("ok", "Webhook dihapus."),
    "webhook_test_sent": ("ok", "Event uji (ping) diantrekan; hasilnya muncul di pengiriman "
                                "terbaru."),
}
